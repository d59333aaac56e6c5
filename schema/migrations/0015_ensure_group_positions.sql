-- queenside storage, version 15: ensure_group positions a new group's
-- cursors by assignments (SCALING.md, section 4).
--
-- A new group's cursor in each partition was positioned by calling
-- first_offset_at and cursor_head inside the INSERT that adds the cursors:
-- on Citus a function that reads distributed tables cannot be called inside
-- a statement on one (R6). They are called by assignments now, partition by
-- partition, and one INSERT adds every cursor. The subscription's start is
-- read once: a group whose start has come is positioned, one whose start is
-- to come is not, as before. The signature stays.

CREATE OR REPLACE FUNCTION queenside.ensure_group(p_queue text, p_group text, p_mode text, p_from timestamp with time zone, OUT o_group bigint, OUT o_queue bigint)
 RETURNS record
 LANGUAGE plpgsql
AS $function$
DECLARE
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
    INSERT INTO queenside.queues (name) VALUES (p_queue) ON CONFLICT (name) DO NOTHING;
    SELECT q.id INTO o_queue FROM queenside.queues q WHERE q.name = p_queue FOR UPDATE;
    v_start := CASE p_mode WHEN 'new' THEN clock_timestamp() WHEN 'from' THEN p_from END;
    INSERT INTO queenside.groups (queue_id, name, subscription_mode, start_at)
    VALUES (o_queue, p_group, p_mode, v_start)
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
$function$;
