-- queenside storage, version 26: the reads, and configure, through
-- functions that check.
--
-- The statements the sidecar ran on the tables to answer stats, the list
-- of queues, the dashboard (its tables, its charts' sampler) and the
-- message browser are now functions of the schema, so that a role that
-- is not the owner, which has no privilege on the tables (version 25),
-- reads what its grants allow and nothing else. Each is SECURITY DEFINER,
-- with search_path pg_catalog, and runs the statement the sidecar ran, on
-- the same keys. A read about one queue, or one partition, needs read
-- there and refuses without it (refuse_unless); a listing of every queue
-- shows only the queues the role may read. configure needs manage on the
-- queue, also to create it.
--
-- Which queues a listing shows is decided apart from its statement on the
-- tables, over the names alone (readable_queue_ids): on Citus a statement
-- on the tables may run on a worker, under the role of the function's
-- owner, where a check of a column would answer for the owner.

-- readable_queue_ids gives the ids of the queues the session's role may
-- read: every queue's for the owner, one check a queue for another role.
-- Called by the functions below, which run as the owner; no other role
-- may call it.
CREATE FUNCTION queenside.readable_queue_ids() RETURNS bigint[]
 LANGUAGE plpgsql STABLE
AS $function$
DECLARE
    v_ids   bigint[];
    v_names text[];
BEGIN
    SELECT coalesce(array_agg(q.id), '{}'), array_agg(q.name) INTO v_ids, v_names FROM queenside.queues q;
    IF queenside.is_owner() THEN
        RETURN v_ids;
    END IF;
    RETURN ARRAY(SELECT u.id FROM unnest(v_ids, v_names) AS u (id, name) WHERE queenside.granted(u.name, 'read', NULL));
END;
$function$;
REVOKE EXECUTE ON FUNCTION queenside.readable_queue_ids() FROM PUBLIC;

-- reading tells the queue of partition p_partition (its id, NULL for a
-- partition that does not exist), and raises the refusal (refuse_unless)
-- unless the session's role may read it. Called by the functions below,
-- as readable_queue_ids is.
CREATE FUNCTION queenside.reading(p_partition bigint) RETURNS bigint
 LANGUAGE plpgsql STABLE
AS $function$
DECLARE
    v_queue bigint;
    v_name  text;
BEGIN
    SELECT q.id, q.name INTO v_queue, v_name
      FROM queenside.partition_names n JOIN queenside.queues q ON q.id = n.queue_id
     WHERE n.id = p_partition;
    PERFORM queenside.refuse_unless(coalesce(v_name, format('(partition %s)', p_partition)), 'read');
    RETURN v_queue;
END;
$function$;
REVOKE EXECUTE ON FUNCTION queenside.reading(bigint) FROM PUBLIC;

-- configure replaces every option of queue p_queue, creating it if
-- needed, and returns the options now in force. manage. The announcement
-- to every sidecar is the caller's own statement, in the same transaction
-- (on Citus, one on no table).
CREATE FUNCTION queenside.configure(p_queue text, p_lease_seconds integer, p_retry_limit integer,
                                    p_dedup_window_seconds integer, p_retention_seconds integer,
                                    p_completed_retention_seconds integer, p_delay_seconds integer,
                                    p_consumption_paused boolean, p_encrypt_payloads boolean, p_max_deliveries integer)
 RETURNS TABLE(o_lease_seconds integer, o_retry_limit integer, o_dedup_window_seconds integer,
               o_retention_seconds integer, o_completed_retention_seconds integer, o_delay_seconds integer,
               o_consumption_paused boolean, o_encrypt_payloads boolean, o_max_deliveries integer)
 LANGUAGE plpgsql SECURITY DEFINER
 SET search_path = pg_catalog, pg_temp
AS $function$
BEGIN
    PERFORM queenside.refuse_unless(p_queue, 'manage');
    INSERT INTO queenside.queues AS q (name, lease_seconds, retry_limit, dedup_window_seconds,
                                       retention_seconds, completed_retention_seconds, delay_seconds,
                                       consumption_paused, encrypt_payloads, max_deliveries)
    VALUES (p_queue, p_lease_seconds, p_retry_limit, p_dedup_window_seconds, p_retention_seconds,
            p_completed_retention_seconds, p_delay_seconds, p_consumption_paused, p_encrypt_payloads, p_max_deliveries)
    ON CONFLICT (name) DO UPDATE SET
        lease_seconds = excluded.lease_seconds,
        retry_limit = excluded.retry_limit,
        dedup_window_seconds = excluded.dedup_window_seconds,
        retention_seconds = excluded.retention_seconds,
        completed_retention_seconds = excluded.completed_retention_seconds,
        delay_seconds = excluded.delay_seconds,
        consumption_paused = excluded.consumption_paused,
        encrypt_payloads = excluded.encrypt_payloads,
        max_deliveries = excluded.max_deliveries
    RETURNING q.lease_seconds, q.retry_limit, q.dedup_window_seconds, q.retention_seconds,
              q.completed_retention_seconds, q.delay_seconds, q.consumption_paused, q.encrypt_payloads,
              q.max_deliveries
    INTO o_lease_seconds, o_retry_limit, o_dedup_window_seconds, o_retention_seconds,
         o_completed_retention_seconds, o_delay_seconds, o_consumption_paused, o_encrypt_payloads,
         o_max_deliveries;
    RETURN NEXT;
END;
$function$;

-- queue_list lists the queues the session's role may read, in name order,
-- with their partition count and options. read (a queue it may not read
-- is left out).
CREATE FUNCTION queenside.queue_list()
 RETURNS TABLE(o_queue text, o_partitions bigint, o_lease_seconds integer, o_retry_limit integer,
               o_dedup_window_seconds integer, o_retention_seconds integer, o_completed_retention_seconds integer,
               o_delay_seconds integer, o_consumption_paused boolean, o_encrypt_payloads boolean, o_max_deliveries integer)
 LANGUAGE plpgsql STABLE SECURITY DEFINER
 SET search_path = pg_catalog, pg_temp
AS $function$
DECLARE
    v_ids bigint[] := queenside.readable_queue_ids();
BEGIN
    RETURN QUERY
    SELECT q.name, (SELECT count(*) FROM queenside.partition_names n WHERE n.queue_id = q.id),
           q.lease_seconds, q.retry_limit, q.dedup_window_seconds, q.retention_seconds,
           q.completed_retention_seconds, q.delay_seconds, q.consumption_paused, q.encrypt_payloads, q.max_deliveries
      FROM queenside.queues q
     WHERE q.id = ANY (v_ids)
     ORDER BY q.name;
END;
$function$;

-- partition_stats describes each partition of queue p_queue, in name
-- order: its id, name, next offset (o_head), how many messages it retains
-- and when its last message was committed. Retention removes whole
-- segments from the front, so the oldest retained offset is the first
-- segment's base. A queue without partitions gives one row, its id with
-- the rest NULL; one that does not exist, none. read.
CREATE FUNCTION queenside.partition_stats(p_queue text)
 RETURNS TABLE(o_queue_id bigint, o_partition_id bigint, o_partition text, o_head bigint, o_messages bigint,
               o_last_committed_at timestamptz)
 LANGUAGE plpgsql STABLE SECURITY DEFINER
 SET search_path = pg_catalog, pg_temp
AS $function$
DECLARE
    v_queue bigint;
BEGIN
    PERFORM queenside.refuse_unless(p_queue, 'read');
    SELECT q.id INTO v_queue FROM queenside.queues q WHERE q.name = p_queue;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT v_queue, p.id, p.name, p.next_offset,
           p.next_offset - coalesce((SELECT sg.base_offset FROM queenside.segments sg
                                      WHERE sg.partition_id = p.id
                                      ORDER BY sg.last_offset LIMIT 1), p.next_offset),
           p.last_committed_at
      FROM queenside.partitions p WHERE p.queue_id = v_queue ORDER BY p.name;
    IF NOT FOUND THEN
        o_queue_id := v_queue;
        RETURN NEXT;
    END IF;
END;
$function$;

-- partition_page is partition_stats for a page: up to p_limit partitions
-- of queue p_queue in name order, after the name p_after ('' from the
-- first), whose names start with p_prefix. The (queue_id, name) index
-- hands the names over in order, from p_after on. A queue without such
-- partitions gives one row, its id with the rest NULL; one that does not
-- exist, none. read.
CREATE FUNCTION queenside.partition_page(p_queue text, p_after text, p_prefix text, p_limit integer)
 RETURNS TABLE(o_queue_id bigint, o_partition_id bigint, o_partition text, o_head bigint, o_messages bigint,
               o_last_committed_at timestamptz)
 LANGUAGE plpgsql STABLE SECURITY DEFINER
 SET search_path = pg_catalog, pg_temp
AS $function$
DECLARE
    v_queue bigint;
BEGIN
    PERFORM queenside.refuse_unless(p_queue, 'read');
    SELECT q.id INTO v_queue FROM queenside.queues q WHERE q.name = p_queue;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT v_queue, p.id, p.name, p.next_offset,
           p.next_offset - coalesce((SELECT sg.base_offset FROM queenside.segments sg
                                      WHERE sg.partition_id = p.id
                                      ORDER BY sg.last_offset LIMIT 1), p.next_offset),
           p.last_committed_at
      FROM queenside.partitions p
     WHERE p.queue_id = v_queue AND p.name > p_after AND starts_with(p.name, p_prefix)
     ORDER BY p.name LIMIT p_limit;
    IF NOT FOUND THEN
        o_queue_id := v_queue;
        RETURN NEXT;
    END IF;
END;
$function$;

-- cursor_stats gives the cursors of queue p_queue's groups: in
-- partitions p_partitions (of that queue) in group name order, or, when
-- NULL, in every partition in partition and group name order. Each is
-- where the group stands (a cursor not positioned yet stands at the
-- partition's end while its subscription is ahead, and once it has begun,
-- at the first message committed since, where the group's next pop
-- positions it), the partition's next offset, and its live lease's
-- expiry (NULL when none is live). A look-up of the partition's segments,
-- not a call of first_offset_at: on Citus a function that reads a
-- distributed table cannot be called inside a read of one (SCALING.md,
-- section 4, R6). read.
CREATE FUNCTION queenside.cursor_stats(p_queue text, p_partitions bigint[] DEFAULT NULL)
 RETURNS TABLE(o_partition_id bigint, o_partition text, o_group text, o_cursor bigint, o_head bigint,
               o_lease_expires_at timestamptz)
 LANGUAGE plpgsql STABLE SECURITY DEFINER
 SET search_path = pg_catalog, pg_temp
AS $function$
DECLARE
    v_queue bigint;
BEGIN
    PERFORM queenside.refuse_unless(p_queue, 'read');
    SELECT q.id INTO v_queue FROM queenside.queues q WHERE q.name = p_queue;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF p_partitions IS NULL THEN
        RETURN QUERY
        SELECT p.id, p.name, g.name,
               CASE WHEN c.committed IS NOT NULL THEN c.committed
                    WHEN g.start_at > now() THEN p.next_offset
                    ELSE coalesce((SELECT s.base_offset FROM queenside.segments s
                                    WHERE s.partition_id = c.partition_id AND (g.start_at IS NULL OR s.committed_at >= g.start_at)
                                    ORDER BY s.last_offset LIMIT 1), p.next_offset) END,
               p.next_offset,
               CASE WHEN c.lease_id IS NOT NULL AND c.lease_expires_at > now() THEN c.lease_expires_at END
          FROM queenside.cursors c
          JOIN queenside.groups g ON g.id = c.group_id
          JOIN queenside.partitions p ON p.id = c.partition_id
         WHERE g.queue_id = v_queue
         ORDER BY p.name, g.name;
    ELSE
        RETURN QUERY
        SELECT p.id, p.name, g.name,
               CASE WHEN c.committed IS NOT NULL THEN c.committed
                    WHEN g.start_at > now() THEN p.next_offset
                    ELSE coalesce((SELECT s.base_offset FROM queenside.segments s
                                    WHERE s.partition_id = c.partition_id AND (g.start_at IS NULL OR s.committed_at >= g.start_at)
                                    ORDER BY s.last_offset LIMIT 1), p.next_offset) END,
               p.next_offset,
               CASE WHEN c.lease_id IS NOT NULL AND c.lease_expires_at > now() THEN c.lease_expires_at END
          FROM queenside.cursors c
          JOIN queenside.groups g ON g.id = c.group_id
          JOIN queenside.partitions p ON p.id = c.partition_id
         WHERE c.partition_id = ANY (p_partitions) AND p.id = ANY (p_partitions) AND g.queue_id = v_queue
         ORDER BY g.name;
    END IF;
END;
$function$;

-- queue_summaries gives, for queue p_queue or, when NULL, every queue the
-- session's role may read, in name order, its totals: partitions,
-- retained messages (each partition's head less its first segment's
-- base: one index probe a partition), pushed (the sum of head offsets),
-- consumed (the sum of every group's cursors) and groups, and its
-- options. The partitions and cursors are summed by queue apart and
-- joined to the queues: on Citus a table read whole on every node
-- (queues) may not be joined outward to one spread over shards. A queue
-- that does not exist gives no row. read (a queue it may not read is left
-- out of the list).
CREATE FUNCTION queenside.queue_summaries(p_queue text DEFAULT NULL)
 RETURNS TABLE(o_queue text, o_partitions bigint, o_messages bigint, o_pushed bigint, o_consumed bigint,
               o_groups bigint, o_lease_seconds integer, o_retry_limit integer, o_dedup_window_seconds integer,
               o_retention_seconds integer, o_completed_retention_seconds integer, o_delay_seconds integer,
               o_consumption_paused boolean, o_encrypt_payloads boolean, o_max_deliveries integer)
 LANGUAGE plpgsql STABLE SECURITY DEFINER
 SET search_path = pg_catalog, pg_temp
AS $function$
DECLARE
    v_ids bigint[];
BEGIN
    IF p_queue IS NULL THEN
        v_ids := queenside.readable_queue_ids();
    ELSE
        PERFORM queenside.refuse_unless(p_queue, 'read');
        v_ids := ARRAY(SELECT q.id FROM queenside.queues q WHERE q.name = p_queue);
    END IF;
    RETURN QUERY
    SELECT q.name, coalesce(pt.n, 0), coalesce(pt.retained, 0), coalesce(pt.pushed, 0), coalesce(ct.consumed, 0),
           (SELECT count(*) FROM queenside.groups g WHERE g.queue_id = q.id),
           q.lease_seconds, q.retry_limit, q.dedup_window_seconds, q.retention_seconds,
           q.completed_retention_seconds, q.delay_seconds, q.consumption_paused, q.encrypt_payloads, q.max_deliveries
      FROM queenside.queues q
      LEFT JOIN (
          SELECT p.queue_id, count(*) AS n, sum(p.next_offset)::bigint AS pushed,
                 sum(p.next_offset - coalesce((SELECT sg.base_offset FROM queenside.segments sg
                                                WHERE sg.partition_id = p.id
                                                ORDER BY sg.last_offset LIMIT 1), p.next_offset))::bigint AS retained
            FROM queenside.partitions p JOIN queenside.queues q ON q.id = p.queue_id
           WHERE q.id = ANY (v_ids)
           GROUP BY p.queue_id) pt ON pt.queue_id = q.id
      LEFT JOIN (
          SELECT g.queue_id, sum(coalesce(c.committed, 0))::bigint AS consumed
            FROM queenside.cursors c JOIN queenside.groups g ON g.id = c.group_id
            JOIN queenside.queues q ON q.id = g.queue_id
           WHERE q.id = ANY (v_ids)
           GROUP BY g.queue_id) ct ON ct.queue_id = q.id
     WHERE q.id = ANY (v_ids)
     ORDER BY q.name;
END;
$function$;

-- group_summaries gives the groups of queue p_queue in name order, each
-- with its lag (what its cursors have not passed, a cursor not positioned
-- yet counting from where its subscription starts), what it consumed
-- (the sum of its cursors), the partitions it holds a live lease on and
-- the commit time of the oldest message it has not consumed. read.
CREATE FUNCTION queenside.group_summaries(p_queue text)
 RETURNS TABLE(o_group text, o_lag bigint, o_consumed bigint, o_leased bigint, o_oldest timestamptz)
 LANGUAGE plpgsql STABLE SECURITY DEFINER
 SET search_path = pg_catalog, pg_temp
AS $function$
DECLARE
    v_queue bigint;
BEGIN
    PERFORM queenside.refuse_unless(p_queue, 'read');
    SELECT q.id INTO v_queue FROM queenside.queues q WHERE q.name = p_queue;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT g.name, coalesce(l.lag, 0)::bigint, coalesce(l.consumed, 0)::bigint, coalesce(l.leased, 0), l.oldest
      FROM queenside.groups g
      LEFT JOIN (SELECT c.group_id,
                        sum(greatest(p.next_offset - CASE WHEN c.committed IS NOT NULL THEN c.committed
                            WHEN g.start_at > now() THEN p.next_offset
                            ELSE coalesce((SELECT s.base_offset FROM queenside.segments s
                                            WHERE s.partition_id = c.partition_id AND (g.start_at IS NULL OR s.committed_at >= g.start_at)
                                            ORDER BY s.last_offset LIMIT 1), p.next_offset) END, 0)) AS lag,
                        sum(c.committed) AS consumed,
                        count(*) FILTER (WHERE c.lease_id IS NOT NULL AND c.lease_expires_at > now()) AS leased,
                        min(c.head_at) FILTER (WHERE c.committed < p.next_offset) AS oldest
                   FROM queenside.cursors c
                   JOIN queenside.partitions p ON p.id = c.partition_id
                   JOIN queenside.groups g ON g.id = c.group_id
                  WHERE g.queue_id = v_queue
                  GROUP BY c.group_id) l ON l.group_id = g.id
     WHERE g.queue_id = v_queue
     ORDER BY g.name;
END;
$function$;

-- queue_counters gives the counters of every queue the session's role may
-- read and each of its groups' lag, in queue and group name order, as the
-- dashboard's history samples them every few seconds: a row a group (one
-- with o_group NULL for a queue without groups), with the queue's pushed
-- messages, and the group's consumed ones and lag. One pass over
-- partitions and one over cursors, aggregated by queue and by group apart
-- (for Citus, as in queue_summaries) and joined to the names after. It
-- reads no segment but for a cursor not positioned yet, so its cost
-- follows partitions and cursors, never messages. The planner prices the
-- segment probe for every cursor, though positioned cursors never run it:
-- with 100,000 cursors that price calls in JIT, which takes 0.2 to 1 s to
-- compile what runs in 60 ms; jit is off. read (a queue it may not read is
-- left out).
CREATE FUNCTION queenside.queue_counters()
 RETURNS TABLE(o_queue text, o_pushed bigint, o_group text, o_consumed bigint, o_lag bigint)
 LANGUAGE plpgsql STABLE SECURITY DEFINER
 SET search_path = pg_catalog, pg_temp
 SET jit = off
AS $function$
DECLARE
    v_ids bigint[] := queenside.readable_queue_ids();
BEGIN
    RETURN QUERY
    SELECT q.name, coalesce(pt.pushed, 0), g.name, coalesce(ct.consumed, 0), coalesce(ct.lag, 0)
      FROM queenside.queues q
      LEFT JOIN (SELECT p.queue_id, sum(p.next_offset)::bigint AS pushed
                   FROM queenside.partitions p GROUP BY p.queue_id) pt ON pt.queue_id = q.id
      LEFT JOIN queenside.groups g ON g.queue_id = q.id
      LEFT JOIN (SELECT c.group_id, sum(coalesce(c.committed, 0))::bigint AS consumed,
                        sum(greatest(p.next_offset - CASE WHEN c.committed IS NOT NULL THEN c.committed
                            WHEN g.start_at > now() THEN p.next_offset
                            ELSE coalesce((SELECT s.base_offset FROM queenside.segments s
                                            WHERE s.partition_id = c.partition_id AND (g.start_at IS NULL OR s.committed_at >= g.start_at)
                                            ORDER BY s.last_offset LIMIT 1), p.next_offset) END, 0))::bigint AS lag
                   FROM queenside.cursors c
                   JOIN queenside.partitions p ON p.id = c.partition_id
                   JOIN queenside.groups g ON g.id = c.group_id
                  GROUP BY c.group_id) ct ON ct.group_id = g.id
     WHERE q.id = ANY (v_ids)
     ORDER BY q.name, g.name;
END;
$function$;

-- partition_bounds looks partition p_partition of queue p_queue up: the
-- queue's id, the partition's, and the offsets it holds (o_first the first
-- retained, o_head when none is; o_head the next to be stored). The name
-- is resolved first, then the partition read by its id alone: on Citus
-- that read goes to the partition's shard only. A partition that does not
-- exist gives the queue's id with the rest NULL; a queue that does not
-- exist, no row. read.
CREATE FUNCTION queenside.partition_bounds(p_queue text, p_partition text)
 RETURNS TABLE(o_queue_id bigint, o_partition_id bigint, o_first bigint, o_head bigint)
 LANGUAGE plpgsql STABLE SECURITY DEFINER
 SET search_path = pg_catalog, pg_temp
AS $function$
BEGIN
    PERFORM queenside.refuse_unless(p_queue, 'read');
    SELECT q.id, n.id INTO o_queue_id, o_partition_id
      FROM queenside.queues q
      LEFT JOIN queenside.partition_names n ON n.queue_id = q.id AND n.name = p_partition
     WHERE q.name = p_queue;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF o_partition_id IS NOT NULL THEN
        SELECT p.next_offset, coalesce((SELECT s.base_offset FROM queenside.segments s
                                         WHERE s.partition_id = o_partition_id
                                         ORDER BY s.last_offset LIMIT 1), p.next_offset)
          INTO o_head, o_first
          FROM queenside.partitions p WHERE p.id = o_partition_id;
    END IF;
    RETURN NEXT;
END;
$function$;

-- offset_at is the first offset of partition p_partition committed at or
-- after p_at (the head when none is): first_offset_at's binary search over
-- segments_pkey. read.
CREATE FUNCTION queenside.offset_at(p_partition bigint, p_at timestamptz) RETURNS bigint
 LANGUAGE plpgsql STABLE SECURITY DEFINER
 SET search_path = pg_catalog, pg_temp
AS $function$
BEGIN
    PERFORM queenside.reading(p_partition);
    RETURN queenside.first_offset_at(p_partition, p_at);
END;
$function$;

-- message_page reads up to p_limit messages of partition p_partition from
-- offset p_from on, in offset order, with the payloads of at most
-- p_max_payload bytes (NULL for a larger one, whose size is given all the
-- same). The segments read are those whose last offset falls in the page
-- and the one after (which may hold the page's end): two range scans of
-- segments_pkey, and only the page's slice of their arrays is unnested.
-- read.
CREATE FUNCTION queenside.message_page(p_partition bigint, p_from bigint, p_limit integer, p_max_payload integer)
 RETURNS TABLE(o_offset bigint, o_committed_at timestamptz, o_message_id uuid, o_transaction_id text,
               o_trace_id text, o_headers bytea, o_payload_bytes integer, o_payload bytea)
 LANGUAGE plpgsql STABLE SECURITY DEFINER
 SET search_path = pg_catalog, pg_temp
AS $function$
BEGIN
    PERFORM queenside.reading(p_partition);
    RETURN QUERY
    SELECT greatest(p_from, s.base_offset) + u.i - 1, s.committed_at, u.mid, u.txid, u.trace, u.hdr,
           octet_length(u.payload), CASE WHEN octet_length(u.payload) <= p_max_payload THEN u.payload END
      FROM (SELECT * FROM queenside.segments s
             WHERE s.partition_id = p_partition AND s.last_offset >= p_from AND s.last_offset < p_from + p_limit
            UNION ALL
            (SELECT * FROM queenside.segments s
              WHERE s.partition_id = p_partition AND s.last_offset >= p_from + p_limit
              ORDER BY s.last_offset LIMIT 1)) s
     CROSS JOIN LATERAL (SELECT greatest(p_from, s.base_offset) - s.base_offset + 1 AS lo,
                                least(p_from + p_limit - 1, s.last_offset) - s.base_offset + 1 AS hi) r
     CROSS JOIN LATERAL unnest(s.message_ids[r.lo:r.hi], s.transaction_ids[r.lo:r.hi], s.payloads[r.lo:r.hi],
                               s.trace_ids[r.lo:r.hi], s.headers[r.lo:r.hi]) WITH ORDINALITY AS u (mid, txid, payload, trace, hdr, i)
     WHERE s.base_offset < p_from + p_limit
     ORDER BY 1;
END;
$function$;

-- find_transaction finds the newest retained message of partition
-- p_partition whose transaction id is p_txid: o_offset, NULL when none is.
-- The kept hashes answer for the messages of their window, in either place
-- a hash is kept: a dedup row (one probe of the dedup_key hash index) or
-- the segment of one message that holds it (one probe of segments_hash);
-- the message counts only if retention has not deleted it since
-- (o_by_dedup). Beyond them, the messages from offset p_scan_from on are
-- searched, newest first, reading their segments' transaction ids only.
-- read.
CREATE FUNCTION queenside.find_transaction(p_partition bigint, p_txid text, p_scan_from bigint,
                                           OUT o_offset bigint, OUT o_by_dedup boolean)
 LANGUAGE plpgsql STABLE SECURITY DEFINER
 SET search_path = pg_catalog, pg_temp
AS $function$
DECLARE
    v_hash uuid := queenside.transaction_hash(p_txid);
    v_base bigint;
    v_txid text;
BEGIN
    PERFORM queenside.reading(p_partition);
    o_by_dedup := false;
    SELECT max(k.msg_offset) INTO o_offset
      FROM (SELECT d.msg_offset FROM queenside.dedup d
             WHERE uuid_hash_extended(d.hash, d.partition_id) = uuid_hash_extended(v_hash, p_partition)
               AND d.partition_id = p_partition AND d.hash = v_hash
            UNION ALL
            SELECT s.last_offset FROM queenside.segments s WHERE s.partition_id = p_partition AND s.hash = v_hash) k;
    IF o_offset IS NOT NULL THEN
        SELECT s.base_offset, s.transaction_ids[o_offset - s.base_offset + 1] INTO v_base, v_txid
          FROM queenside.segments s
         WHERE s.partition_id = p_partition AND s.last_offset >= o_offset
         ORDER BY s.last_offset LIMIT 1;
        IF v_base <= o_offset AND v_txid = p_txid THEN
            o_by_dedup := true;
            RETURN;
        END IF;
    END IF;
    SELECT s.base_offset + u.i - 1 INTO o_offset
      FROM queenside.segments s
     CROSS JOIN LATERAL unnest(s.transaction_ids) WITH ORDINALITY AS u (txid, i)
     WHERE s.partition_id = p_partition AND s.last_offset >= p_scan_from AND u.txid = p_txid
       AND s.base_offset + u.i - 1 >= p_scan_from
     ORDER BY 1 DESC LIMIT 1;
END;
$function$;

-- group_position reads group p_group's cursor and live lease in partition
-- p_partition: where the cursor stands (as cursor_stats has it), whether
-- a lease is live, its offsets and expiry, the offsets acked under it, and
-- the failed deliveries remembered. A group the partition's queue does not
-- have gives no row; one without a cursor in the partition, its id with
-- the rest NULL. read.
CREATE FUNCTION queenside.group_position(p_partition bigint, p_group text)
 RETURNS TABLE(o_group_id bigint, o_cursor bigint, o_leased boolean, o_lease_from bigint, o_lease_to bigint,
               o_lease_expires_at timestamptz, o_acked bigint[], o_fail_offsets bigint[], o_fail_counts integer[])
 LANGUAGE plpgsql STABLE SECURITY DEFINER
 SET search_path = pg_catalog, pg_temp
AS $function$
DECLARE
    v_queue bigint := queenside.reading(p_partition);
    v_group bigint;
BEGIN
    SELECT g.id INTO v_group FROM queenside.groups g WHERE g.queue_id = v_queue AND g.name = p_group;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT v_group,
           CASE WHEN c.committed IS NOT NULL THEN c.committed
                WHEN g.start_at > now() THEN p.next_offset
                ELSE coalesce((SELECT s.base_offset FROM queenside.segments s
                                WHERE s.partition_id = c.partition_id AND (g.start_at IS NULL OR s.committed_at >= g.start_at)
                                ORDER BY s.last_offset LIMIT 1), p.next_offset) END,
           c.lease_id IS NOT NULL AND c.lease_expires_at > now(),
           c.lease_from, c.lease_to, c.lease_expires_at, coalesce(c.lease_done, '{}'), c.fail_offsets, c.fail_counts
      FROM queenside.cursors c
      JOIN queenside.groups g ON g.id = c.group_id
      JOIN queenside.partitions p ON p.id = c.partition_id
     WHERE c.partition_id = p_partition AND p.id = p_partition AND c.group_id = v_group;
    IF NOT FOUND THEN
        o_group_id := v_group;
        RETURN NEXT;
    END IF;
END;
$function$;
