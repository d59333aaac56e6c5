-- queenside storage, version 5: cheaper pushes, acks and partitions.
--
-- Each change below says what it fixes; BENCHMARKS.md ("Found by
-- measuring") has the measurements.
--
-- The duplicate probe goes through a hash index. The primary key of dedup,
-- a B-tree on (partition, hash), took most of push's time in PostgreSQL:
-- each message put a random 128-bit key into it, a descent and a leaf that
-- is seldom the last one's. A hash index on the hash finds a row with one
-- bucket read and takes a new one at the end of its bucket: a probe and
-- insert of 200 messages measured about 30% cheaper than the insert ... on
-- conflict into the B-tree (pgbench, 1,000,000 rows kept, three rounds).
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

-- push, as in 0001, with the probe above and two costs of calls over many
-- partitions cut: a call with one message per partition builds each segment
-- from elements of the input arrays rather than slices of them, and the
-- queues to wake come with the partition locks rather than from a join of
-- their own. No sequential scan for the probe (push_general runs under the
-- same setting).
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

-- cursor_head, as in 0001, with its lookups written inline: PL/pgSQL keeps
-- their plans for the session, while the SQL function head_at it called
-- was planned again in every transaction (50 µs of each ack and pop that
-- moves a cursor, 120 µs at the end of a partition).
CREATE OR REPLACE FUNCTION queenside.cursor_head(p_partition bigint, p_offset bigint) RETURNS timestamptz
LANGUAGE plpgsql AS $$
DECLARE
    v_at timestamptz;
BEGIN
    SELECT s.committed_at INTO v_at FROM queenside.segments s
     WHERE s.partition_id = p_partition AND s.last_offset >= p_offset
     ORDER BY s.last_offset LIMIT 1;
    IF FOUND THEN
        RETURN v_at;
    END IF;
    PERFORM 1 FROM queenside.partitions p WHERE p.id = p_partition FOR KEY SHARE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN now();
    END IF;
    SELECT s.committed_at INTO v_at FROM queenside.segments s
     WHERE s.partition_id = p_partition AND s.last_offset >= p_offset
     ORDER BY s.last_offset LIMIT 1;
    RETURN v_at;
END;
$$;

-- ack_call applies a whole ack call in one statement, whatever the number
-- of leases it names. The common case, a lease whose items all completed,
-- by offset, a run that reaches the end of the lease from at or below the
-- cursor, is one set-based update for all such leases of the call: the
-- cursor moves past the lease and the lease is released. Every other lease
-- goes through queenside.ack (0003) as before, with the same answers.
-- With cursor_head as above, an ack of one lease and 100 items went from
-- 0.89-0.95 ms of PostgreSQL to 0.60-0.75 ms, and in the mixed scenario
-- from 11.1 to 8.8 µs a message (BENCHMARKS.md).
--
-- p_groups, p_partitions and p_leases describe the leases of the call (one
-- slot each); item i belongs to slot p_slots[i] and carries p_offsets[i]
-- (NULL when named by transaction id, whose hash is p_hashes[i]),
-- p_failed[i] and p_errors[i]. The answer has a row per item, idx being
-- its position in the call.
CREATE FUNCTION queenside.ack_call(p_groups bigint[], p_partitions bigint[], p_leases uuid[],
                                   p_slots integer[], p_offsets bigint[], p_hashes uuid[],
                                   p_failed boolean[], p_errors text[])
RETURNS TABLE (idx integer, success boolean, code text, dead_lettered boolean, released boolean, cursor_offset bigint)
LANGUAGE plpgsql
SET jit = off
AS $$
DECLARE
    v_fast  integer[]; -- slots applied by the set-based update
    v_cur   bigint[];  -- and the cursor each now stands at
    v_items integer[];
    k       integer;
BEGIN
    -- Every cursor of the call, locked in (group, partition) order, so two
    -- calls can never deadlock (ack locks its row again: a no-op).
    PERFORM 1 FROM queenside.cursors cu
      JOIN unnest(p_groups, p_partitions) AS l (g, p) ON cu.group_id = l.g AND cu.partition_id = l.p
     ORDER BY cu.group_id, cu.partition_id
       FOR UPDATE OF cu;

    -- The common case. Completed offsets forming a gapless run lo..hi, with
    -- lo between the lease's start and the cursor and hi its last offset,
    -- move the cursor to hi + 1 exactly as ack would: the run covers the
    -- cursor's own message (so no message deleted by retention is in the
    -- way), and every completion remembered past a gap lies inside it.
    WITH runs AS (
        SELECT u.s, min(u.o) AS lo, max(u.o) AS hi, count(DISTINCT u.o) AS n,
               bool_and(NOT u.f AND u.o IS NOT NULL) AS plain
          FROM unnest(p_slots, p_offsets, p_failed) AS u (s, o, f)
         GROUP BY u.s
    ), done AS (
        UPDATE queenside.cursors cu
           SET committed = r.hi + 1, head_at = queenside.cursor_head(cu.partition_id, r.hi + 1),
               lease_id = NULL, lease_done = NULL,
               delivered_to = ARRAY(SELECT x FROM unnest(cu.delivered_to) x WHERE x > r.hi ORDER BY x),
               fail_offsets = ARRAY(SELECT o FROM unnest(cu.fail_offsets) o WHERE o > r.hi ORDER BY o),
               fail_counts = ARRAY(SELECT c FROM unnest(cu.fail_offsets, cu.fail_counts) f (o, c)
                                    WHERE o > r.hi ORDER BY o)
          FROM runs r
         WHERE r.plain AND r.hi - r.lo + 1 = r.n
           AND cu.group_id = p_groups[r.s] AND cu.partition_id = p_partitions[r.s]
           AND cu.lease_id = p_leases[r.s] AND cu.lease_expires_at > now()
           AND r.hi = cu.lease_to AND r.lo >= cu.lease_from AND r.lo <= cu.committed
        RETURNING r.s, r.hi + 1 AS cur
    )
    SELECT array_agg(d.s), array_agg(d.cur) INTO v_fast, v_cur FROM done d;

    RETURN QUERY
    SELECT u.i::integer, true, NULL::text, false, true, f.cur
      FROM unnest(p_slots) WITH ORDINALITY AS u (s, i)
      JOIN unnest(v_fast, v_cur) AS f (s, cur) ON f.s = u.s;

    -- The rest, lease by lease in (group, partition) order.
    FOR k IN
        SELECT l.k FROM unnest(p_groups, p_partitions) WITH ORDINALITY AS l (g, p, k)
         WHERE v_fast IS NULL OR NOT (l.k::integer = ANY (v_fast))
         ORDER BY l.g, l.p
    LOOP
        v_items := ARRAY(SELECT u.i FROM unnest(p_slots) WITH ORDINALITY AS u (s, i) WHERE u.s = k ORDER BY u.i);
        RETURN QUERY
        SELECT v_items[a.idx]::integer, a.success, a.code, a.dead_lettered, a.released, a.cursor_offset
          FROM queenside.ack(p_groups[k], p_partitions[k], p_leases[k],
                             ARRAY(SELECT p_offsets[i] FROM unnest(v_items) WITH ORDINALITY AS x (i, o) ORDER BY x.o),
                             CASE WHEN p_hashes IS NOT NULL THEN
                                  ARRAY(SELECT p_hashes[i] FROM unnest(v_items) WITH ORDINALITY AS x (i, o) ORDER BY x.o) END,
                             ARRAY(SELECT p_failed[i] FROM unnest(v_items) WITH ORDINALITY AS x (i, o) ORDER BY x.o),
                             ARRAY(SELECT p_errors[i] FROM unnest(v_items) WITH ORDINALITY AS x (i, o) ORDER BY x.o)) a;
    END LOOP;
END;
$$;
