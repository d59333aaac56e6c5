-- queenside storage, version 12: a pop of a queue that does not exist
-- creates nothing.
--
-- A pop used to create the queue it named (ensure_group), so a typo in a
-- consumer's queue name left a queue behind in every listing. A pop now
-- joins its group with join_group, which creates neither queue nor group
-- while the queue does not exist; a push or a configure creates the queue,
-- as before. A consumer started before its producers still gets what its
-- subscription promised from the moment of its first pop: that pop records
-- the subscription in early_groups (its mode, and for `new` the moment it
-- came; the first pop's record stays), which no listing reads, and the
-- group's first pop once the queue exists takes its start from there and
-- removes the record. A `new` subscription recorded before the queue
-- existed therefore starts before the queue's first message, and is
-- delivered all of it.
--
-- early_groups is the coordinator's own on Citus, as maintenance is: only
-- join_group reads it, and only on the coordinator.
--
-- ensure_group, which sidecars of version 11 call, keeps its behaviour (it
-- creates the queue, then joins the group) so that they go on working
-- while pods are upgraded.

CREATE TABLE queenside.early_groups (
    queue_name        text NOT NULL,
    group_name        text NOT NULL,
    subscription_mode text NOT NULL,
    start_at          timestamptz,
    first_pop_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT early_groups_pkey PRIMARY KEY (queue_name, group_name)
);

-- join_group returns a group's id and its queue's, creating the group (and
-- positioning it in every partition) on its first pop once the queue
-- exists. While the queue does not exist it returns NULLs, having recorded
-- the subscription of the group's first pop.
CREATE FUNCTION queenside.join_group(p_queue text, p_group text, p_mode text, p_from timestamptz,
                                     OUT o_group bigint, OUT o_queue bigint)
RETURNS record
LANGUAGE plpgsql
AS $$
DECLARE
    v_mode  text;
    v_start timestamptz;
    v_pids  bigint[] := '{}';
    v_curs  bigint[] := '{}';
    v_heads timestamptz[] := '{}';
    v_cur   bigint;
    v_pid   bigint;
BEGIN
    SELECT g.id, g.queue_id INTO o_group, o_queue
      FROM queenside.groups g
      JOIN queenside.queues q ON q.id = g.queue_id
     WHERE q.name = p_queue AND g.name = p_group;
    IF FOUND THEN
        RETURN;
    END IF;
    SELECT q.id INTO o_queue FROM queenside.queues q WHERE q.name = p_queue FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO queenside.early_groups (queue_name, group_name, subscription_mode, start_at)
        VALUES (p_queue, p_group, p_mode, CASE p_mode WHEN 'new' THEN clock_timestamp() WHEN 'from' THEN p_from END)
        ON CONFLICT (queue_name, group_name) DO NOTHING;
        RETURN;
    END IF;
    -- The queue row's lock, held from here, makes one creator of the group.
    DELETE FROM queenside.early_groups e WHERE e.queue_name = p_queue AND e.group_name = p_group
    RETURNING e.subscription_mode, e.start_at INTO v_mode, v_start;
    IF NOT FOUND THEN
        v_mode := p_mode;
        v_start := CASE p_mode WHEN 'new' THEN clock_timestamp() WHEN 'from' THEN p_from END;
    END IF;
    INSERT INTO queenside.groups (queue_id, name, subscription_mode, start_at)
    VALUES (o_queue, p_group, v_mode, v_start)
    ON CONFLICT (queue_id, name) DO NOTHING
    RETURNING id INTO o_group;
    IF o_group IS NULL THEN -- created meanwhile by someone who held the lock before us
        SELECT g.id INTO o_group FROM queenside.groups g WHERE g.queue_id = o_queue AND g.name = p_group;
        RETURN;
    END IF;
    -- Position the group in every partition now (unless its subscription
    -- starts in the future), so pops never have to. Each position and head
    -- is worked out by an assignment, partition by partition: on Citus a
    -- function that reads segments cannot be called inside a statement on
    -- a distributed table (SCALING.md, section 4, R6).
    IF v_start IS NULL OR v_start <= clock_timestamp() THEN
        FOR v_pid IN SELECT p.id FROM queenside.partitions p WHERE p.queue_id = o_queue ORDER BY p.id LOOP
            v_cur := queenside.first_offset_at(v_pid, v_start);
            v_pids := v_pids || v_pid;
            v_curs := v_curs || v_cur;
            v_heads := v_heads || CASE WHEN v_cur IS NOT NULL THEN queenside.cursor_head(v_pid, v_cur) END;
        END LOOP;
        INSERT INTO queenside.cursors (group_id, partition_id, committed, head_at)
        SELECT o_group, u.pid, u.cur, u.head FROM unnest(v_pids, v_curs, v_heads) AS u (pid, cur, head);
    ELSE
        INSERT INTO queenside.cursors (group_id, partition_id, committed, head_at)
        SELECT o_group, p.id, NULL, NULL FROM queenside.partitions p WHERE p.queue_id = o_queue;
    END IF;
    -- A new group adds a cursor per partition at once; without fresh
    -- statistics pop's plans would treat the group as empty (sorting every
    -- cursor instead of reading them in order) until autovacuum came by.
    ANALYZE queenside.cursors;
END;
$$;

-- ensure_group, for sidecars of version 11: the queue created if need be,
-- then the group joined.
CREATE OR REPLACE FUNCTION queenside.ensure_group(p_queue text, p_group text, p_mode text, p_from timestamp with time zone,
                                                  OUT o_group bigint, OUT o_queue bigint)
RETURNS record
LANGUAGE plpgsql
AS $$
BEGIN
    SELECT j.o_group, j.o_queue INTO o_group, o_queue FROM queenside.join_group(p_queue, p_group, p_mode, p_from) j;
    IF o_group IS NULL THEN
        INSERT INTO queenside.queues (name) VALUES (p_queue) ON CONFLICT (name) DO NOTHING;
        SELECT j.o_group, j.o_queue INTO o_group, o_queue FROM queenside.join_group(p_queue, p_group, p_mode, p_from) j;
    END IF;
END;
$$;
