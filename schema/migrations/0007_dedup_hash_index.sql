-- queenside storage, version 7: the duplicate probe through a hash index.
--
-- The primary key of dedup, a B-tree on (partition, hash), took most of
-- push's time in PostgreSQL: each message put a random 128-bit key into it,
-- a descent and a leaf that is seldom the last one's (about 60% of a push of
-- 100 messages over 10 partitions). A hash index on the hash finds a row
-- with one bucket read and takes a new one at the end of its bucket: a
-- probe and insert of 200 messages measured about 30% cheaper than the
-- insert ... on conflict into the B-tree (pgbench, 1,000,000 rows kept,
-- three rounds each; BENCHMARKS.md).
--
-- A hash index cannot be unique, and it needs not be: every dedup row is
-- written by push, under the row lock of its partition (0001), so a probe
-- made under that lock is exact until the commit. The janitor only deletes
-- rows. push probes the call's hashes and, when none is stored, inserts
-- them; anything found goes the general way, which now replaces a row it
-- takes over (delete and insert) where it relied on the key before.
--
-- Building the index reads the whole table under a lock that pushes wait
-- for: on a database with many hashes kept, upgrade when a pause of pushes
-- (about 2 s per million rows here) is acceptable.
ALTER TABLE queenside.dedup DROP CONSTRAINT dedup_pkey;
CREATE INDEX dedup_hash ON queenside.dedup USING hash (hash);

-- A plan cached while dedup was small would read the whole table for every
-- probe, since a hash index is chosen only when the planner believes the
-- table big: every function that looks hashes up goes through the index
-- whatever the statistics say (they have no scan that wants otherwise).
ALTER FUNCTION queenside.ack(bigint, bigint, uuid, bigint[], uuid[], boolean[], text[]) SET enable_seqscan = off;
ALTER FUNCTION queenside.purge_dedup(bigint, integer, integer) SET enable_seqscan = off;
ALTER FUNCTION queenside.purge_orphan_hashes(integer, integer) SET enable_seqscan = off;

-- push, as in 0005, with the probe above (and, for it, no sequential scan:
-- push_general runs under the same setting).
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
LANGUAGE plpgsql
SET enable_seqscan = off
SET jit = off
AS $$
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

    -- The common case: no hash of the call is stored in its partition, so
    -- every message is new. Only push writes dedup rows, and only under the
    -- row lock of their partition, which this call holds: what this probe
    -- does not find cannot appear before the commit, and a plain insert
    -- follows. Anything found, inside its window or not, takes the general
    -- path.
    IF p_leaders IS NULL AND NOT EXISTS (
           SELECT 1 FROM unnest(p_slots, p_hashes) AS u (s, h)
             JOIN queenside.dedup d ON d.hash = u.h AND d.partition_id = p_ids[u.s]) THEN
        INSERT INTO queenside.dedup (partition_id, hash, msg_offset, message_id, committed_at)
        SELECT p_ids[u.s], u.h, bases[u.s] + (u.o - p_starts[u.s]), u.m, v_at
          FROM unnest(p_slots, p_hashes, p_message_ids) WITH ORDINALITY AS u (s, h, m, o);
        v_count := n;
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

-- push_general, as in 0001, replacing the rows it takes over.
CREATE OR REPLACE FUNCTION queenside.push_general(
    p_at timestamptz, p_ids bigint[], p_bases bigint[], p_slots integer[], p_hashes uuid[],
    p_leaders integer[], p_message_ids uuid[], p_transaction_ids text[],
    p_payloads bytea[], p_trace_ids text[], p_headers bytea[]
) RETURNS void
LANGUAGE sql AS $$
    WITH part AS (
        SELECT b.id, b.base, q.dedup_window_seconds > 0 AS dedup,
               p_at - make_interval(secs => q.dedup_window_seconds) AS cutoff
          FROM unnest(p_ids, p_bases) AS b (id, base)
          JOIN queenside.partitions p ON p.id = b.id
          JOIN queenside.queues q ON q.id = p.queue_id
    ), fresh AS (
        SELECT u.pid, u.o, u.h, u.m, u.txid, u.payload, u.trace, u.hdr,
               pt.base + row_number() OVER (PARTITION BY u.pid ORDER BY u.o) - 1 AS off
          FROM (SELECT p_ids[x.s] AS pid, x.*
                  FROM unnest(p_slots, p_hashes, coalesce(p_leaders, '{}'), p_message_ids, p_transaction_ids,
                              p_payloads, p_trace_ids, p_headers)
                       WITH ORDINALITY AS x (s, h, l, m, txid, payload, trace, hdr, o)) u
          JOIN part pt ON pt.id = u.pid
         WHERE NOT pt.dedup
            OR (coalesce(u.l, u.o) = u.o
                AND NOT EXISTS (SELECT 1 FROM queenside.dedup d
                                 WHERE d.partition_id = u.pid AND d.hash = u.h
                                   AND d.msg_offset < pt.base AND d.committed_at > pt.cutoff))
    ), replaced AS (
        -- A hash a stored message takes over: outside its window, or in a
        -- queue that does not deduplicate.
        DELETE FROM queenside.dedup d
         USING (SELECT DISTINCT f.pid, f.h FROM fresh f) x
         WHERE d.hash = x.h AND d.partition_id = x.pid
    ), hashes AS (
        INSERT INTO queenside.dedup (partition_id, hash, msg_offset, message_id, committed_at)
        SELECT DISTINCT ON (f.pid, f.h) f.pid, f.h, f.off, f.m, p_at
          FROM fresh f
         ORDER BY f.pid, f.h, f.off DESC
    ), segments AS (
        INSERT INTO queenside.segments (partition_id, last_offset, base_offset, committed_at,
                                        message_ids, transaction_ids, payloads, trace_ids, headers)
        SELECT f.pid, max(f.off), min(f.off), p_at,
               array_agg(f.m ORDER BY f.off), array_agg(f.txid ORDER BY f.off),
               array_agg(f.payload ORDER BY f.off),
               CASE WHEN bool_or(f.trace IS NOT NULL) THEN array_agg(f.trace ORDER BY f.off) END,
               CASE WHEN bool_or(f.hdr IS NOT NULL) THEN array_agg(f.hdr ORDER BY f.off) END
          FROM fresh f
         GROUP BY f.pid
    )
    UPDATE queenside.partitions p
       SET next_offset = c.last + 1, last_committed_at = p_at
      FROM (SELECT f.pid, max(f.off) AS last FROM fresh f GROUP BY f.pid) c
     WHERE p.id = c.pid
$$;
