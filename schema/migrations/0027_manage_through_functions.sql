-- queenside storage, version 27: the dead letters, the groups' list and
-- deletion, seek and the maintenance mode through functions that check.
--
-- The sidecar ran these statements on the tables directly, which a role
-- that is not the owner may no longer do (version 25). Each is now a
-- SECURITY DEFINER function that asks the right first, with the SQL it
-- ran kept as it was:
--
--   read     the dead letters' list, count and summary; the groups' list
--   manage   replay and delete dead letters, delete a group, seek any
--            group; the maintenance mode is manage on '*'
--   consume  seek of a group the role consumes as
--
-- A listing of every queue (an empty queue name, the dashboard's view)
-- shows the queues the role may read and no other. A call that names a
-- queue is refused before the queue is looked for: a role learns nothing,
-- not even whether it exists, of a queue it has no right on.
--
-- A queue or partition that does not exist is raised as undefined_object
-- (42704) with the schema named and the queue in the table field, and for
-- a partition its name in the column field; the sidecar answers it
-- not_found.

-- queue_exists tells whether queue p_queue exists, once the session's
-- role is known to hold p_right on it (refused otherwise, whether the
-- queue exists or not).
CREATE FUNCTION queenside.queue_exists(p_queue text, p_right text)
 RETURNS boolean
 LANGUAGE plpgsql STABLE SECURITY DEFINER
 SET search_path = pg_catalog, pg_temp
AS $function$
BEGIN
    PERFORM queenside.refuse_unless(p_queue, p_right);
    RETURN EXISTS (SELECT 1 FROM queenside.queues q WHERE q.name = p_queue);
END;
$function$;

-- dlq_list lists dead letters in id order after p_after_id, at most
-- p_limit: queue p_queue's, or, for '', those of every queue the role may
-- read; filtered by group, partition (NULL: any), a substring of the error
-- ('': any) and the time of death (from inclusive, to exclusive; NULL: no
-- bound). read.
CREATE FUNCTION queenside.dlq_list(p_queue text, p_group text, p_partition text, p_error_contains text,
                                   p_dead_from timestamptz, p_dead_to timestamptz, p_after_id bigint, p_limit integer)
 RETURNS TABLE(o_id bigint, o_queue text, o_partition text, o_group text, o_offset bigint, o_message_id uuid,
               o_transaction_id text, o_payload bytea, o_error text, o_failures integer, o_committed_at timestamptz,
               o_dead_at timestamptz, o_replayed_at timestamptz, o_replay_message_id uuid,
               o_replay_transaction_id text, o_replay_offset bigint)
 LANGUAGE plpgsql STABLE SECURITY DEFINER
 SET search_path = pg_catalog, pg_temp
AS $function$
DECLARE
    v_readable bigint[];
BEGIN
    -- Two statements, not one with the queue's condition optional, so
    -- that a listing of one queue always reads the (queue_name, id) index.
    IF p_queue <> '' THEN
        PERFORM queenside.refuse_unless(p_queue, 'read');
        RETURN QUERY
        SELECT d.id, d.queue_name, d.partition_name, d.group_name, d.msg_offset, d.message_id, d.transaction_id,
               d.payload, coalesce(d.error, ''), d.failures, d.committed_at, d.dead_at, d.replayed_at,
               d.replay_message_id, d.replay_transaction_id, d.replay_offset
          FROM queenside.dead_letters d
         WHERE d.queue_name = p_queue
           AND (p_group IS NULL OR d.group_name = p_group) AND (p_partition IS NULL OR d.partition_name = p_partition)
           AND (p_error_contains = '' OR strpos(coalesce(d.error, ''), p_error_contains) > 0)
           AND (p_dead_from IS NULL OR d.dead_at >= p_dead_from) AND (p_dead_to IS NULL OR d.dead_at < p_dead_to)
           AND d.id > p_after_id
         ORDER BY d.id LIMIT p_limit;
        RETURN;
    END IF;
    v_readable := queenside.readable_queue_ids();
    RETURN QUERY
    SELECT d.id, d.queue_name, d.partition_name, d.group_name, d.msg_offset, d.message_id, d.transaction_id,
           d.payload, coalesce(d.error, ''), d.failures, d.committed_at, d.dead_at, d.replayed_at,
           d.replay_message_id, d.replay_transaction_id, d.replay_offset
      FROM queenside.dead_letters d
     WHERE d.queue_id = ANY (v_readable)
       AND (p_group IS NULL OR d.group_name = p_group) AND (p_partition IS NULL OR d.partition_name = p_partition)
       AND (p_error_contains = '' OR strpos(coalesce(d.error, ''), p_error_contains) > 0)
       AND (p_dead_from IS NULL OR d.dead_at >= p_dead_from) AND (p_dead_to IS NULL OR d.dead_at < p_dead_to)
       AND d.id > p_after_id
     ORDER BY d.id LIMIT p_limit;
END;
$function$;

-- dlq_count counts the dead letters dlq_list's filter selects, and how
-- many of them were replayed. read.
CREATE FUNCTION queenside.dlq_count(p_queue text, p_group text, p_partition text, p_error_contains text,
                                    p_dead_from timestamptz, p_dead_to timestamptz,
                                    OUT o_count bigint, OUT o_replayed bigint)
 LANGUAGE plpgsql STABLE SECURITY DEFINER
 SET search_path = pg_catalog, pg_temp
AS $function$
DECLARE
    v_readable bigint[];
BEGIN
    IF p_queue <> '' THEN
        PERFORM queenside.refuse_unless(p_queue, 'read');
        SELECT count(*), count(d.replayed_at) INTO o_count, o_replayed
          FROM queenside.dead_letters d
         WHERE d.queue_name = p_queue
           AND (p_group IS NULL OR d.group_name = p_group) AND (p_partition IS NULL OR d.partition_name = p_partition)
           AND (p_error_contains = '' OR strpos(coalesce(d.error, ''), p_error_contains) > 0)
           AND (p_dead_from IS NULL OR d.dead_at >= p_dead_from) AND (p_dead_to IS NULL OR d.dead_at < p_dead_to);
        RETURN;
    END IF;
    v_readable := queenside.readable_queue_ids();
    SELECT count(*), count(d.replayed_at) INTO o_count, o_replayed
      FROM queenside.dead_letters d
     WHERE d.queue_id = ANY (v_readable)
       AND (p_group IS NULL OR d.group_name = p_group) AND (p_partition IS NULL OR d.partition_name = p_partition)
       AND (p_error_contains = '' OR strpos(coalesce(d.error, ''), p_error_contains) > 0)
       AND (p_dead_from IS NULL OR d.dead_at >= p_dead_from) AND (p_dead_to IS NULL OR d.dead_at < p_dead_to);
END;
$function$;

-- dlq_summary counts queue p_queue's dead letters (those of every queue
-- the role may read, for '') by queue, group and error, the most frequent
-- first, at most p_limit rows. read.
CREATE FUNCTION queenside.dlq_summary(p_queue text, p_limit integer)
 RETURNS TABLE(o_queue text, o_group text, o_error text, o_count bigint, o_replayed bigint,
               o_first_dead_at timestamptz, o_last_dead_at timestamptz)
 LANGUAGE plpgsql STABLE SECURITY DEFINER
 SET search_path = pg_catalog, pg_temp
AS $function$
DECLARE
    v_readable bigint[];
BEGIN
    IF p_queue <> '' THEN
        PERFORM queenside.refuse_unless(p_queue, 'read');
    ELSE
        v_readable := queenside.readable_queue_ids();
    END IF;
    RETURN QUERY
    SELECT d.queue_name, d.group_name, coalesce(d.error, ''), count(*), count(d.replayed_at), min(d.dead_at), max(d.dead_at)
      FROM queenside.dead_letters d
     WHERE (p_queue = '' AND d.queue_id = ANY (v_readable)) OR d.queue_name = p_queue
     GROUP BY 1, 2, 3 ORDER BY 4 DESC, 1, 2, 3 LIMIT p_limit;
END;
$function$;

-- dlq_manageable decides which of the dead letters p_ids a bulk action by
-- ids may touch, for the session's role: it returns the names of their
-- queues it may manage, or NULL for the owner (every queue). Entries are
-- named by ids across queues, so the selection cannot be refused by its
-- queue up front. An entry in a queue the role may read but not manage
-- refuses the whole call (manage on that queue): whoever names entries
-- expects each to be replayed or deleted, or to be told why, not a batch
-- half done and a count short; and the queue is one the role sees in its
-- listings already. An entry in a queue the role may not even read is
-- treated as one that does not exist (the caller answers its id
-- not_found): the role cannot have listed it, and a refusal would tell it
-- the queue's name.
CREATE FUNCTION queenside.dlq_manageable(p_ids bigint[])
 RETURNS text[]
 LANGUAGE plpgsql STABLE
AS $function$
DECLARE
    v_queue text;
    v_ok    text[] := '{}';
BEGIN
    IF queenside.is_owner() THEN
        RETURN NULL;
    END IF;
    FOR v_queue IN SELECT DISTINCT d.queue_name FROM queenside.dead_letters d WHERE d.id = ANY (p_ids)
                    ORDER BY d.queue_name LOOP
        IF queenside.granted(v_queue, 'manage', NULL) THEN
            v_ok := v_ok || v_queue;
        ELSIF queenside.granted(v_queue, 'read', NULL) THEN
            PERFORM queenside.refuse_unless(v_queue, 'manage');
        END IF;
    END LOOP;
    RETURN v_ok;
END;
$function$;
REVOKE EXECUTE ON FUNCTION queenside.dlq_manageable(bigint[]) FROM PUBLIC;

-- dlq_entries reads what a replay needs of the dead letters a selection
-- names: those of p_ids that exist (dlq_manageable says which a role that
-- is not the owner may touch), in id order; or, p_ids NULL, the next batch
-- of dlq_list's filter on queue p_queue in id order after p_after_id, at
-- most p_limit. manage.
CREATE FUNCTION queenside.dlq_entries(p_ids bigint[], p_queue text, p_group text, p_partition text,
                                      p_error_contains text, p_dead_from timestamptz, p_dead_to timestamptz,
                                      p_after_id bigint, p_limit integer)
 RETURNS TABLE(o_id bigint, o_partition_id bigint, o_queue text, o_partition text, o_message_id uuid,
               o_payload bytea, o_trace_id text, o_headers bytea, o_replayed boolean)
 LANGUAGE plpgsql STABLE SECURITY DEFINER
 SET search_path = pg_catalog, pg_temp
AS $function$
DECLARE
    v_queues text[];
BEGIN
    IF p_ids IS NOT NULL THEN
        v_queues := queenside.dlq_manageable(p_ids);
        RETURN QUERY
        SELECT d.id, d.partition_id, d.queue_name, d.partition_name, d.message_id, d.payload, d.trace_id, d.headers,
               d.replayed_at IS NOT NULL
          FROM queenside.dead_letters d
         WHERE d.id = ANY (p_ids) AND (v_queues IS NULL OR d.queue_name = ANY (v_queues))
         ORDER BY d.id;
        RETURN;
    END IF;
    PERFORM queenside.refuse_unless(p_queue, 'manage');
    RETURN QUERY
    SELECT d.id, d.partition_id, d.queue_name, d.partition_name, d.message_id, d.payload, d.trace_id, d.headers,
           d.replayed_at IS NOT NULL
      FROM queenside.dead_letters d
     WHERE d.queue_name = p_queue
       AND (p_group IS NULL OR d.group_name = p_group) AND (p_partition IS NULL OR d.partition_name = p_partition)
       AND (p_error_contains = '' OR strpos(coalesce(d.error, ''), p_error_contains) > 0)
       AND (p_dead_from IS NULL OR d.dead_at >= p_dead_from) AND (p_dead_to IS NULL OR d.dead_at < p_dead_to)
       AND d.id > p_after_id
     ORDER BY d.id LIMIT p_limit;
END;
$function$;

-- dlq_refuse_partition refuses a role that is not the owner unless it may
-- manage the queue of partition p_partition: a replay's lock and marks
-- name entries by partition. The refusal names the queue only to a role
-- with some right on it (touches, version 25); to another, which learns
-- nothing of the queues it may not use, it names the partition's id.
CREATE FUNCTION queenside.dlq_refuse_partition(p_partition bigint)
 RETURNS void
 LANGUAGE plpgsql STABLE
AS $function$
DECLARE
    v_name text;
BEGIN
    IF queenside.is_owner() THEN
        RETURN;
    END IF;
    SELECT q.name INTO v_name
      FROM queenside.partition_names n JOIN queenside.queues q ON q.id = n.queue_id
     WHERE n.id = p_partition;
    IF FOUND AND NOT queenside.granted(v_name, 'manage', NULL) THEN
        PERFORM queenside.refuse_unless(CASE WHEN queenside.touches(v_name) THEN v_name
                                             ELSE format('(partition %s)', p_partition) END, 'manage');
    END IF;
END;
$function$;
REVOKE EXECUTE ON FUNCTION queenside.dlq_refuse_partition(bigint) FROM PUBLIC;

-- dlq_lock locks the dead letters p_ids of partition p_partition that are
-- still to replay (every one when p_again), in id order, and returns their
-- ids: a replay calls it a partition at a time, in partition order, in its
-- transaction (on Citus a statement on one shard: a row lock may not span
-- shards). manage.
CREATE FUNCTION queenside.dlq_lock(p_partition bigint, p_ids bigint[], p_again boolean)
 RETURNS SETOF bigint
 LANGUAGE plpgsql SECURITY DEFINER
 SET search_path = pg_catalog, pg_temp
AS $function$
BEGIN
    PERFORM queenside.dlq_refuse_partition(p_partition);
    RETURN QUERY
    SELECT d.id FROM queenside.dead_letters d
     WHERE d.partition_id = p_partition AND d.id = ANY (p_ids) AND (p_again OR d.replayed_at IS NULL)
     ORDER BY d.id FOR UPDATE;
END;
$function$;

-- dlq_mark_replayed records on the dead letters p_ids of partition
-- p_partition as what each was replayed: the message id, transaction id,
-- offset and commit time at the same positions. manage.
CREATE FUNCTION queenside.dlq_mark_replayed(p_partition bigint, p_ids bigint[], p_message_ids uuid[],
                                            p_transaction_ids text[], p_offsets bigint[], p_ats timestamptz[])
 RETURNS void
 LANGUAGE plpgsql SECURITY DEFINER
 SET search_path = pg_catalog, pg_temp
AS $function$
BEGIN
    PERFORM queenside.dlq_refuse_partition(p_partition);
    UPDATE queenside.dead_letters d
       SET replayed_at = m.at, replay_message_id = m.mid, replay_transaction_id = m.tx, replay_offset = m.off
      FROM unnest(p_ids, p_message_ids, p_transaction_ids, p_offsets, p_ats) AS m (id, mid, tx, off, at)
     WHERE d.partition_id = p_partition AND d.id = m.id;
END;
$function$;

-- dlq_delete deletes the dead letters a selection names: those of p_ids
-- (as dlq_entries reads them), or the next batch of dlq_list's filter on
-- queue p_queue after p_after_id, at most p_limit entries. It returns how
-- many it deleted, how many the batch read, and the last id it read (NULL
-- when none). manage.
CREATE FUNCTION queenside.dlq_delete(p_ids bigint[], p_queue text, p_group text, p_partition text,
                                     p_error_contains text, p_dead_from timestamptz, p_dead_to timestamptz,
                                     p_after_id bigint, p_limit integer,
                                     OUT o_deleted integer, OUT o_read integer, OUT o_last_id bigint)
 LANGUAGE plpgsql SECURITY DEFINER
 SET search_path = pg_catalog, pg_temp
AS $function$
DECLARE
    v_queues text[];
    v_pids   bigint[];
    v_ids    bigint[];
BEGIN
    -- The batch is read, then deleted by its keys, its partitions naming
    -- the shards: on Citus a statement that modifies several shards can
    -- neither read them in a CTE nor go unpruned (R1).
    IF p_ids IS NOT NULL THEN
        v_queues := queenside.dlq_manageable(p_ids);
        SELECT array_agg(b.partition_id ORDER BY b.id), array_agg(b.id ORDER BY b.id) INTO v_pids, v_ids
          FROM (SELECT d.partition_id, d.id FROM queenside.dead_letters d
                 WHERE d.id = ANY (p_ids) AND (v_queues IS NULL OR d.queue_name = ANY (v_queues))) b;
    ELSE
        PERFORM queenside.refuse_unless(p_queue, 'manage');
        SELECT array_agg(b.partition_id ORDER BY b.id), array_agg(b.id ORDER BY b.id) INTO v_pids, v_ids
          FROM (SELECT d.partition_id, d.id FROM queenside.dead_letters d
                 WHERE d.queue_name = p_queue
                   AND (p_group IS NULL OR d.group_name = p_group) AND (p_partition IS NULL OR d.partition_name = p_partition)
                   AND (p_error_contains = '' OR strpos(coalesce(d.error, ''), p_error_contains) > 0)
                   AND (p_dead_from IS NULL OR d.dead_at >= p_dead_from) AND (p_dead_to IS NULL OR d.dead_at < p_dead_to)
                   AND d.id > p_after_id
                 ORDER BY d.id LIMIT p_limit) b;
    END IF;
    o_deleted := 0;
    o_read := coalesce(cardinality(v_ids), 0);
    o_last_id := v_ids[o_read];
    IF o_read = 0 THEN
        RETURN;
    END IF;
    DELETE FROM queenside.dead_letters d WHERE d.partition_id = ANY (v_pids) AND d.id = ANY (v_ids);
    GET DIAGNOSTICS o_deleted = ROW_COUNT;
END;
$function$;

-- list_groups lists the groups of queue p_queue (of every queue the role
-- may read, for '') with their lag: the messages their cursors have not
-- passed (a cursor not positioned yet counts from where its subscription
-- starts), the commit time of the oldest of them, and the partitions they
-- hold a live lease on. read.
CREATE FUNCTION queenside.list_groups(p_queue text)
 RETURNS TABLE(o_queue text, o_group text, o_lag bigint, o_leased integer, o_oldest timestamptz)
 LANGUAGE plpgsql STABLE SECURITY DEFINER
 SET search_path = pg_catalog, pg_temp
AS $function$
DECLARE
    v_readable bigint[];
BEGIN
    IF p_queue <> '' THEN
        PERFORM queenside.refuse_unless(p_queue, 'read');
    ELSE
        v_readable := queenside.readable_queue_ids();
    END IF;
    -- The cursors are summed by group apart and joined to the groups: on
    -- Citus a table read whole on every node (groups) may not be joined
    -- outward to one spread over shards (cursors). The cursor's position is
    -- the sidecar's cursorPosition (store/queues.go).
    RETURN QUERY
    SELECT q.name, g.name, coalesce(l.lag, 0)::bigint, coalesce(l.leased, 0)::integer, l.oldest
      FROM queenside.groups g
      JOIN queenside.queues q ON q.id = g.queue_id
      LEFT JOIN (SELECT c.group_id,
                        sum(greatest(p.next_offset - CASE WHEN c.committed IS NOT NULL THEN c.committed
                            WHEN g.start_at > now() THEN p.next_offset
                            ELSE coalesce((SELECT s.base_offset FROM queenside.segments s
                                            WHERE s.partition_id = c.partition_id AND (g.start_at IS NULL OR s.committed_at >= g.start_at)
                                            ORDER BY s.last_offset LIMIT 1), p.next_offset) END, 0)) AS lag,
                        count(*) FILTER (WHERE c.lease_id IS NOT NULL AND c.lease_expires_at > now()) AS leased,
                        min(c.head_at) FILTER (WHERE c.committed < p.next_offset) AS oldest
                   FROM queenside.cursors c
                   JOIN queenside.partitions p ON p.id = c.partition_id
                   JOIN queenside.groups g ON g.id = c.group_id
                   JOIN queenside.queues q ON q.id = g.queue_id
                  WHERE (p_queue = '' AND q.id = ANY (v_readable)) OR q.name = p_queue
                  GROUP BY c.group_id) l ON l.group_id = g.id
     WHERE (p_queue = '' AND q.id = ANY (v_readable)) OR q.name = p_queue
     ORDER BY q.name, g.name;
END;
$function$;

-- delete_group removes group p_group of queue p_queue and its cursors (its
-- dead letters stay), and tells whether there was one. manage.
CREATE FUNCTION queenside.delete_group(p_queue text, p_group text)
 RETURNS boolean
 LANGUAGE plpgsql SECURITY DEFINER
 SET search_path = pg_catalog, pg_temp
AS $function$
BEGIN
    PERFORM queenside.refuse_unless(p_queue, 'manage');
    DELETE FROM queenside.groups g USING queenside.queues q
     WHERE g.queue_id = q.id AND q.name = p_queue AND g.name = p_group;
    RETURN FOUND;
END;
$function$;

-- seek_group moves the cursors of group p_group of queue p_queue (of its
-- partition p_partition alone, unless NULL) to the beginning, the end or
-- the time p_at (p_to), ending their leases, and returns each partition's
-- new cursor in name order. A group that does not exist yet is made first,
-- as a pop makes it (join_group). Allowed with manage on the queue, or
-- consume as the group; making a group is consuming as it (version 22),
-- so a role that may manage but not consume as the group seeks it only
-- once it exists. A queue or a named partition that does not exist is not
-- found (42704), after the check.
CREATE FUNCTION queenside.seek_group(p_queue text, p_group text, p_partition text, p_to text, p_at timestamptz)
 RETURNS TABLE(o_partition text, o_cursor bigint)
 LANGUAGE plpgsql SECURITY DEFINER
 SET search_path = pg_catalog, pg_temp
AS $function$
DECLARE
    v_queue bigint;
    v_group bigint;
    v_pid   bigint;
BEGIN
    IF NOT queenside.may(p_queue, 'manage') THEN
        PERFORM queenside.refuse_unless(p_queue, 'consume', p_group);
    END IF;
    SELECT q.id INTO v_queue FROM queenside.queues q WHERE q.name = p_queue;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'queue % does not exist', p_queue
            USING ERRCODE = 'undefined_object', SCHEMA = 'queenside', TABLE = p_queue;
    END IF;
    IF p_partition IS NOT NULL THEN
        SELECT n.id INTO v_pid FROM queenside.partition_names n WHERE n.queue_id = v_queue AND n.name = p_partition;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'partition % of % does not exist', p_partition, p_queue
                USING ERRCODE = 'undefined_object', SCHEMA = 'queenside', TABLE = p_queue, COLUMN = p_partition;
        END IF;
    END IF;
    SELECT g.id INTO v_group FROM queenside.groups g WHERE g.queue_id = v_queue AND g.name = p_group;
    IF NOT FOUND THEN
        SELECT j.o_group INTO v_group FROM queenside.join_group(p_queue, p_group, 'all', NULL) j;
        IF v_group IS NULL THEN -- the queue was deleted meanwhile
            RAISE EXCEPTION 'queue % does not exist', p_queue
                USING ERRCODE = 'undefined_object', SCHEMA = 'queenside', TABLE = p_queue;
        END IF;
    END IF;
    RETURN QUERY SELECT s.partition_name, s.cursor_offset FROM queenside.seek(v_group, v_pid, p_to, p_at) s;
END;
$function$;

-- set_maintenance changes the maintenance state (a NULL keeps its value;
-- a state turned on keeps the time it was first turned on) and announces
-- it to every sidecar (!control on the wake channel) in the same
-- transaction. It returns the new state, no row when the maintenance row
-- is missing. manage on '*', every queue's.
CREATE FUNCTION queenside.set_maintenance(p_push boolean, p_pop boolean)
 RETURNS TABLE(o_push boolean, o_pop boolean, o_push_since timestamptz, o_pop_since timestamptz)
 LANGUAGE plpgsql SECURITY DEFINER
 SET search_path = pg_catalog, pg_temp
AS $function$
BEGIN
    PERFORM queenside.refuse_unless('*', 'manage');
    RETURN QUERY
    UPDATE queenside.maintenance m SET
        push = coalesce(p_push, m.push),
        pop = coalesce(p_pop, m.pop),
        push_since = CASE WHEN coalesce(p_push, m.push) THEN coalesce(m.push_since, now()) END,
        pop_since = CASE WHEN coalesce(p_pop, m.pop) THEN coalesce(m.pop_since, now()) END
    RETURNING m.push, m.pop, m.push_since, m.pop_since;
    IF FOUND THEN
        PERFORM pg_notify('queenside_wake', '!control');
    END IF;
END;
$function$;
