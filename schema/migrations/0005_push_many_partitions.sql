-- push, as in 0001, with two costs of calls over many partitions cut: a
-- call with one message per partition builds each segment from elements of
-- the input arrays rather than slices of them, and the queues to wake come
-- with the partition locks rather than from a join of their own.
CREATE OR REPLACE FUNCTION queenside.push(
    p_ids             bigint[],
    p_starts          integer[],
    p_counts          integer[],
    p_slots           integer[],
    p_hashes          uuid[],
    p_leaders         integer[],
    p_message_ids     uuid[],
    p_transaction_ids text[],
    p_payloads        bytea[],
    p_trace_ids       text[],
    p_headers         bytea[],
    OUT committed_at     timestamptz,
    OUT bases            bigint[],
    OUT dedup_on         boolean[],
    OUT dup_positions    integer[],
    OUT dup_offsets      bigint[],
    OUT dup_message_ids  uuid[],
    OUT dup_committed_at timestamptz[]
)
LANGUAGE plpgsql AS $$
DECLARE
    n       integer := cardinality(p_hashes);
    v_at    timestamptz;
    v_count integer := -1; -- messages stored; -1 until known
    v_found integer;
    v_queues text[];
BEGIN
    -- Every partition's row lock, taken in id order so that two pushes can
    -- never deadlock. The locks serialise offset allocation: they are what
    -- makes offsets gapless and commit times monotone.
    SELECT array_agg(l.next_offset ORDER BY l.id), array_agg(l.dedup ORDER BY l.id),
           max(l.last_committed_at), count(*), array_agg(DISTINCT l.queue)
      INTO bases, dedup_on, v_at, v_found, v_queues
      FROM (SELECT p.id, p.next_offset, p.last_committed_at, q.dedup_window_seconds > 0 AS dedup, q.name AS queue
              FROM queenside.partitions p
              JOIN queenside.queues q ON q.id = p.queue_id
             WHERE p.id = ANY (p_ids)
             ORDER BY p.id
               FOR UPDATE OF p) l;
    IF v_found <> cardinality(p_ids) THEN
        RAISE EXCEPTION 'queenside: % of % partitions exist', v_found, cardinality(p_ids)
            USING ERRCODE = 'no_data_found';
    END IF;
    -- Read the clock only once the locks are held, and never behind a last
    -- commit, so commit times never decrease with offset.
    v_at := greatest(clock_timestamp(), v_at);
    committed_at := v_at;

    IF p_leaders IS NULL THEN
        -- Tentatively every message is new. A hash stored inside its
        -- window is left alone (and not counted); one outside it, or in a
        -- queue that does not deduplicate, is taken over.
        INSERT INTO queenside.dedup AS d (partition_id, hash, msg_offset, message_id, committed_at)
        SELECT p_ids[u.s], u.h, bases[u.s] + (u.o - p_starts[u.s]), u.m, v_at
          FROM unnest(p_slots, p_hashes, p_message_ids) WITH ORDINALITY AS u (s, h, m, o)
        ON CONFLICT (partition_id, hash) DO UPDATE
           SET msg_offset = excluded.msg_offset, message_id = excluded.message_id, committed_at = excluded.committed_at
         WHERE d.committed_at <= v_at - (SELECT make_interval(secs => q.dedup_window_seconds)
                                          FROM queenside.partitions p JOIN queenside.queues q ON q.id = p.queue_id
                                         WHERE p.id = d.partition_id);
        GET DIAGNOSTICS v_count = ROW_COUNT;
    END IF;

    IF v_count = n THEN -- every message is new
        IF cardinality(p_ids) = 1 THEN -- the segment is the input as it is
            INSERT INTO queenside.segments (partition_id, last_offset, base_offset, committed_at,
                                            message_ids, transaction_ids, payloads, trace_ids, headers)
            VALUES (p_ids[1], bases[1] + n - 1, bases[1], v_at,
                    p_message_ids, p_transaction_ids, p_payloads, p_trace_ids, p_headers);
        ELSIF n = cardinality(p_ids) THEN -- one message per partition
            -- Elements, not slices: an array parameter is held expanded,
            -- so an element is read in place, while every slice would
            -- flatten the whole array first.
            INSERT INTO queenside.segments (partition_id, last_offset, base_offset, committed_at,
                                            message_ids, transaction_ids, payloads, trace_ids, headers)
            SELECT p_ids[k], bases[k], bases[k], v_at,
                   ARRAY[p_message_ids[k]], ARRAY[p_transaction_ids[k]], ARRAY[p_payloads[k]],
                   CASE WHEN p_trace_ids IS NOT NULL THEN ARRAY[p_trace_ids[k]] END,
                   CASE WHEN p_headers IS NOT NULL THEN ARRAY[p_headers[k]] END
              FROM generate_subscripts(p_ids, 1) AS k;
        ELSE -- each partition's segment is its run of the input
            INSERT INTO queenside.segments (partition_id, last_offset, base_offset, committed_at,
                                            message_ids, transaction_ids, payloads, trace_ids, headers)
            SELECT p_ids[k], bases[k] + p_counts[k] - 1, bases[k], v_at,
                   p_message_ids[p_starts[k] : p_starts[k] + p_counts[k] - 1],
                   p_transaction_ids[p_starts[k] : p_starts[k] + p_counts[k] - 1],
                   p_payloads[p_starts[k] : p_starts[k] + p_counts[k] - 1],
                   p_trace_ids[p_starts[k] : p_starts[k] + p_counts[k] - 1],
                   p_headers[p_starts[k] : p_starts[k] + p_counts[k] - 1]
              FROM generate_subscripts(p_ids, 1) AS k;
        END IF;
        UPDATE queenside.partitions p SET next_offset = p.next_offset + c.n, last_committed_at = v_at
          FROM unnest(p_ids, p_counts) AS c (id, n)
         WHERE p.id = c.id;
        -- Groups waiting at the end of these partitions now have a head.
        UPDATE queenside.cursors cu SET head_at = v_at
         WHERE cu.partition_id = ANY (p_ids) AND cu.head_at IS NULL AND cu.committed IS NOT NULL;
    ELSE
        PERFORM queenside.push_general(v_at, p_ids, bases, p_slots, p_hashes, p_leaders,
                                       p_message_ids, p_transaction_ids, p_payloads, p_trace_ids, p_headers);
        UPDATE queenside.cursors cu SET head_at = v_at
          FROM unnest(p_ids, bases) AS b (id, base)
          JOIN queenside.partitions p ON p.id = b.id
         WHERE p.next_offset > b.base
           AND cu.partition_id = b.id AND cu.head_at IS NULL AND cu.committed IS NOT NULL;
        -- The messages stored already, with their originals: hashes that
        -- still name an offset below their partition's base.
        SELECT array_agg(u.o ORDER BY u.o), array_agg(d.msg_offset ORDER BY u.o),
               array_agg(d.message_id ORDER BY u.o), array_agg(d.committed_at ORDER BY u.o)
          INTO dup_positions, dup_offsets, dup_message_ids, dup_committed_at
          FROM unnest(p_slots, p_hashes, coalesce(p_leaders, '{}')) WITH ORDINALITY AS u (s, h, l, o)
         CROSS JOIN LATERAL (
               SELECT d.msg_offset, d.message_id, d.committed_at FROM queenside.dedup d
                WHERE d.partition_id = p_ids[u.s] AND d.hash = u.h AND d.msg_offset < bases[u.s]
                LIMIT 1) d
         WHERE coalesce(u.l, u.o) = u.o;
    END IF;

    -- Wake the pops waiting on these queues, on every sidecar. Delivered
    -- at commit; identical notifications of one transaction fold into one.
    PERFORM queenside.wake(w) FROM unnest(v_queues) AS w;
END;
$$;

-- ensure_partitions, as in 0002, but looking partitions up by their queue's
-- id: the join on the queue's name let a plan cached while the queue was
-- small read the whole partitions table on every call, and a table of
-- partitions updated by every push holds many dead versions (20 ms a call at
-- 10,000 partitions, and the calls of racing first pushes queue behind it).
-- Every statement here is a lookup by key, so a sequential scan is never the
-- better plan and is priced out, JIT with it.
CREATE OR REPLACE FUNCTION queenside.ensure_partitions(p_queue text, p_names text[])
RETURNS TABLE (o_name text, o_id bigint)
LANGUAGE plpgsql
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    v_queue   bigint;
    v_missing text[];
    v_added   bigint;
BEGIN
    SELECT q.id INTO v_queue FROM queenside.queues q WHERE q.name = p_queue;
    v_missing := ARRAY(
        SELECT n FROM unnest(p_names) n
         WHERE v_queue IS NULL
            OR NOT EXISTS (SELECT 1 FROM queenside.partitions p WHERE p.queue_id = v_queue AND p.name = n));
    IF cardinality(v_missing) > 0 THEN
        INSERT INTO queenside.queues (name) VALUES (p_queue) ON CONFLICT DO NOTHING;
        SELECT q.id INTO v_queue FROM queenside.queues q WHERE q.name = p_queue FOR UPDATE;
        -- A new partition is empty: a group whose subscription has started
        -- reads it from offset 0; one that starts later is positioned then.
        WITH created AS (
            INSERT INTO queenside.partitions (queue_id, name)
            SELECT v_queue, n FROM unnest(v_missing) n
            ON CONFLICT (queue_id, name) DO NOTHING
            RETURNING queenside.partitions.id)
        INSERT INTO queenside.cursors (group_id, partition_id, committed)
        SELECT g.id, c.id, CASE WHEN g.start_at IS NULL OR g.start_at <= clock_timestamp() THEN 0 END
          FROM created c, queenside.groups g
         WHERE g.queue_id = v_queue;
        GET DIAGNOSTICS v_added = ROW_COUNT;
        IF v_added > 0 AND v_added * 2 > (SELECT greatest(c.reltuples, 0) FROM pg_class c
                                           WHERE c.oid = 'queenside.cursors'::regclass) THEN
            ANALYZE queenside.cursors;
        END IF;
    END IF;
    RETURN QUERY
    SELECT p.name, p.id FROM queenside.partitions p
     WHERE p.queue_id = v_queue AND p.name = ANY (p_names);
END;
$$;
