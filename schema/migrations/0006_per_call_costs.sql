-- queenside storage, version 6: less work a call. A partition is locked by
-- its update, push and pop keep their plans, pop reads no segment past what
-- it delivers, and partitions are looked up by key and created side by
-- side.
--
-- BENCHMARKS.md ("Found by measuring") has the measurements.
--
-- push locked each partition of a call (SELECT ... FOR UPDATE) and then
-- updated it: two row versions and two WAL records a partition. Updating
-- it at once takes the same lock with one: 100 partitions measured 1.21 ms
-- locked and updated against 0.80 ms updated (pgbench, commit included),
-- about 4 µs a partition, which is most of what pushing over many
-- partitions costs beyond pushing over a few. The update assumes every
-- message is new, which the duplicate probe then confirms; the general
-- path takes the move back before it allocates offsets its own way.
-- cursor_head, which must see a push in flight as a lock it cannot take,
-- now asks for a share lock (see it below).
--
-- PL/pgSQL plans a statement with parameters five times for their values,
-- then keeps a generic plan only if it looks no dearer than those; when it
-- looks dearer, it plans again on every call. pg_stat_statements
-- (track_planning) showed three statements of push and one of pop doing
-- that: 0.14 ms of planning in every push, a quarter of what a
-- single-message push costs PostgreSQL, and 0.18 ms in every pop. push's
-- generic plans are the same index lookups (sequential and bitmap scans
-- are off for it), the dearer look only coming from not knowing how long
-- the arrays are, so push keeps them. pop's statement was a join over the
-- partitions it locked, whose generic plan can scan whole tables (pop may
-- need those scans elsewhere): it now reads those partitions one at a
-- time, by key, which every plan does the same way.

-- push, as in 0005, locking by the update, and with generic plans.
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
SET enable_bitmapscan = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    n       integer := cardinality(p_hashes);
    v_clock timestamptz := clock_timestamp();
    v_at    timestamptz;
    v_count integer := -1; -- messages stored; -1 until known
    v_found integer;
    v_queues text[];
BEGIN
    -- Every partition's row lock, taken by moving the partition's next
    -- offset past the call's messages as if all were new: one row version
    -- a partition, where locking it and then updating it made two. The
    -- update walks p_ids (in id order) or the primary key, so rows are
    -- locked in id order and two pushes can never deadlock; bitmap scans,
    -- which would visit them in physical order, are off for the function.
    -- The locks serialise offset allocation: they are what makes offsets
    -- gapless and commit times monotone. The clock was read before the
    -- locks; a partition whose last commit is later keeps that time.
    WITH moved AS (
        UPDATE queenside.partitions p
           SET next_offset = p.next_offset + c.n,
               last_committed_at = greatest(v_clock, p.last_committed_at)
          FROM unnest(p_ids, p_counts) AS c (id, n)
         WHERE p.id = c.id
        RETURNING p.id, p.next_offset - c.n AS base, p.last_committed_at AS at, p.queue_id)
    SELECT array_agg(m.base ORDER BY m.id), array_agg(q.dedup_window_seconds > 0 ORDER BY m.id),
           max(m.at), count(*), array_agg(DISTINCT q.name)
      INTO bases, dedup_on, v_at, v_found, v_queues
      FROM moved m
      JOIN queenside.queues q ON q.id = m.queue_id;
    IF v_found <> cardinality(p_ids) THEN
        RAISE EXCEPTION 'queenside: % of % partitions exist', v_found, cardinality(p_ids)
            USING ERRCODE = 'no_data_found';
    END IF;
    -- One commit time for the call, never behind a partition's last
    -- commit: when the clock is behind one (it stepped back, or another
    -- pod's runs ahead), every partition of the call takes that time.
    IF v_at > v_clock THEN
        UPDATE queenside.partitions p SET last_committed_at = v_at
         WHERE p.id = ANY (p_ids) AND p.last_committed_at < v_at;
    END IF;
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
        -- Groups waiting at the end of these partitions now have a head.
        UPDATE queenside.cursors cu SET head_at = v_at
         WHERE cu.partition_id = ANY (p_ids) AND cu.head_at IS NULL AND cu.committed IS NOT NULL;
    ELSE
        -- Take back the move: push_general moves each partition past what
        -- it stores, and a partition where it stores nothing stays put.
        UPDATE queenside.partitions p SET next_offset = b.base
          FROM unnest(p_ids, bases) AS b (id, base)
         WHERE p.id = b.id;
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

-- cursor_head, as in 0005, share-locking the partition row rather than
-- key-share-locking it. It tells "no push in flight, so a fresh look is
-- exact" from "a push holds the partition" by whether it gets that lock at
-- once (0001). A push used to hold the row locked for update, which every
-- lock mode conflicts with; it now holds it by updating columns outside the
-- key, which a key-share lock does not conflict with. A cursor moved to the
-- end of its partition while a push there was in flight then got no head,
-- and pop never saw the partition again until the next push to it.
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
    PERFORM 1 FROM queenside.partitions p WHERE p.id = p_partition FOR SHARE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN now();
    END IF;
    SELECT s.committed_at INTO v_at FROM queenside.segments s
     WHERE s.partition_id = p_partition AND s.last_offset >= p_offset
     ORDER BY s.last_offset LIMIT 1;
    RETURN v_at;
END;
$$;

-- ensure_partitions, as in 0005, but creators of partitions of one queue no
-- longer queue up behind each other, and each name is looked up by key.
-- With four producers bringing new partitions at once, each call waited
-- about 9 ms for the queue's row lock (the first 10,000 partitions of the
-- partitions scenario). And the lookups were joins that the planner, while
-- its statistics still said the table was small, ran as a scan of all the
-- queue's partitions: 4 ms a call of 100 names at 10,000 partitions, 14 ms
-- at 20,000 (pgbench). A lookup of one name by key has no other plan.
CREATE OR REPLACE FUNCTION queenside.ensure_partitions(p_queue text, p_names text[])
RETURNS TABLE (o_name text, o_id bigint)
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_bitmapscan = off
SET jit = off
AS $$
DECLARE
    v_queue   bigint;
    v_ids     bigint[]; -- p_names' ids, NULL for a partition that is missing
    v_missing text[];
    v_added   bigint;
BEGIN
    SELECT q.id INTO v_queue FROM queenside.queues q WHERE q.name = p_queue;
    v_ids := ARRAY(
        SELECT (SELECT p.id FROM queenside.partitions p WHERE p.queue_id = v_queue AND p.name = u.n)
          FROM unnest(p_names) WITH ORDINALITY AS u (n, o)
         ORDER BY u.o);
    IF array_position(v_ids, NULL) IS NOT NULL THEN
        -- In name order, so that two creators of the same partitions wait
        -- for each other in one direction only.
        v_missing := ARRAY(SELECT u.n FROM unnest(p_names, v_ids) AS u (n, id) WHERE u.id IS NULL ORDER BY u.n);
        INSERT INTO queenside.queues (name) VALUES (p_queue) ON CONFLICT DO NOTHING;
        -- A share lock: creators of partitions run side by side, and wait
        -- only for a group being created (ensure_group locks the row for
        -- update), whose cursors their statements below then see, as the
        -- group sees their partitions once they commit.
        SELECT q.id INTO v_queue FROM queenside.queues q WHERE q.name = p_queue FOR SHARE;
        -- A new partition is empty: a group whose subscription has started
        -- reads it from offset 0; one that starts later is positioned then.
        WITH created AS (
            INSERT INTO queenside.partitions (queue_id, name)
            SELECT v_queue, n FROM unnest(v_missing) n ORDER BY n
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
        -- The missing ones again: created here, or by a creator this call
        -- waited for.
        v_ids := ARRAY(
            SELECT coalesce(u.id, (SELECT p.id FROM queenside.partitions p WHERE p.queue_id = v_queue AND p.name = u.n))
              FROM unnest(p_names, v_ids) WITH ORDINALITY AS u (n, id, o)
             ORDER BY u.o);
    END IF;
    RETURN QUERY SELECT u.n, u.id FROM unnest(p_names, v_ids) AS u (n, id);
END;
$$;

-- pop, as in 0003, reading its partitions' cursors one at a time (see the
-- top), and reading segments only up to the one that holds the last offset
-- it delivers. The scan of a run was bounded below by the cursor and only
-- filtered above, so it read every segment from the cursor to the end of
-- the partition: a pop cost more the longer the backlog behind it (0.7 ms
-- to return 10 messages from a partition holding 40,000, of a 1.0 ms pop).
CREATE OR REPLACE FUNCTION queenside.pop(p_group bigint, p_partition bigint, p_max_partitions integer,
                              p_batch integer, p_lease_seconds integer, p_auto_ack boolean)
RETURNS TABLE (partition_id bigint, partition_name text, lease_id uuid, lease_from bigint, lease_to bigint,
               lease_expires_at timestamptz, head_attempts integer, seen_to bigint,
               first_offset bigint, committed_at timestamptz, message_ids uuid[], transaction_ids text[],
               payloads bytea[], trace_ids text[], headers bytea[])
LANGUAGE plpgsql
-- As 0002 set them: CREATE OR REPLACE resets a function's settings.
SET enable_sort = off
SET jit = off
AS $$
DECLARE
    v_start_at  timestamptz;
    v_delay     interval;
    v_lease_len interval;
    v_now       timestamptz := now();
    v_left      integer := p_batch;
    c           record;
    v_pids      bigint[];
    v_pid       bigint;
    v_cur       bigint;
    v_last      bigint;
    v_lease     uuid;
    v_expires   timestamptz;
    v_seen      bigint;
    v_delivered bigint[];
    v_attempts  integer;
BEGIN
    SELECT g.start_at, make_interval(secs => q.delay_seconds),
           make_interval(secs => coalesce(p_lease_seconds, q.lease_seconds))
      INTO v_start_at, v_delay, v_lease_len
      FROM queenside.groups g JOIN queenside.queues q ON q.id = g.queue_id
     WHERE g.id = p_group;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'queenside: group % does not exist', p_group USING ERRCODE = 'no_data_found';
    END IF;

    -- A subscription that started since: position its cursors now.
    IF v_start_at <= v_now AND EXISTS (SELECT 1 FROM queenside.cursors cu
                                        WHERE cu.group_id = p_group AND cu.committed IS NULL) THEN
        UPDATE queenside.cursors cu
           SET committed = x.cur, head_at = queenside.cursor_head(cu.partition_id, x.cur)
          FROM (SELECT c2.partition_id, queenside.first_offset_at(c2.partition_id, v_start_at) AS cur
                  FROM queenside.cursors c2 WHERE c2.group_id = p_group AND c2.committed IS NULL) x
         WHERE cu.group_id = p_group AND cu.partition_id = x.partition_id;
    END IF;

    -- The partitions to serve, locked: ready ones (a message waiting, no
    -- live lease of the group), the one whose next message has waited
    -- longest first. SKIP LOCKED and the recheck of the conditions under
    -- the lock are what keep two pops from ever leasing one partition.
    IF p_partition IS NULL THEN
        v_pids := ARRAY(
            SELECT cu.partition_id
              FROM queenside.cursors cu
              JOIN queenside.partitions p ON p.id = cu.partition_id
             WHERE cu.group_id = p_group
               AND cu.head_at IS NOT NULL AND cu.head_at <= v_now - v_delay
               AND (cu.lease_id IS NULL OR cu.lease_expires_at <= v_now)
               AND p.next_offset > cu.committed
             ORDER BY cu.head_at, cu.partition_id
             LIMIT p_max_partitions
               FOR UPDATE OF cu SKIP LOCKED);
    ELSE
        v_pids := ARRAY(
            SELECT cu.partition_id
              FROM queenside.cursors cu
              JOIN queenside.partitions p ON p.id = cu.partition_id
             WHERE cu.group_id = p_group AND cu.partition_id = p_partition
               AND cu.head_at IS NOT NULL AND cu.head_at <= v_now - v_delay
               AND (cu.lease_id IS NULL OR cu.lease_expires_at <= v_now)
               AND p.next_offset > cu.committed
               FOR UPDATE OF cu SKIP LOCKED);
    END IF;

    FOREACH v_pid IN ARRAY v_pids LOOP
        EXIT WHEN v_left <= 0;
        SELECT cu.partition_id AS pid, p.name AS pname, cu.delivered_to, cu.fail_offsets, cu.fail_counts,
               cu.committed, cu.head_at, cu.committed AS cur, p.next_offset
          INTO c
          FROM queenside.cursors cu
          JOIN queenside.partitions p ON p.id = cu.partition_id
         WHERE cu.group_id = p_group AND cu.partition_id = v_pid;
        CONTINUE WHEN NOT FOUND; -- the queue was deleted meanwhile
        -- Start at the cursor, or at the first message still retained: past
        -- the end when retention deleted everything from the cursor on.
        v_cur := greatest(c.cur, coalesce((SELECT s.base_offset FROM queenside.segments s
                                            WHERE s.partition_id = c.pid AND s.last_offset >= c.cur
                                            ORDER BY s.last_offset LIMIT 1), c.next_offset));
        -- Deliverable messages are a contiguous run from the cursor: offsets
        -- are gapless and commit times grow with them. Without a delay, that
        -- is every message up to the partition's end.
        IF v_delay = interval '0' THEN
            v_last := c.next_offset - 1;
        ELSE
            SELECT s.last_offset INTO v_last FROM queenside.segments s
             WHERE s.partition_id = c.pid AND s.committed_at <= v_now - v_delay
             ORDER BY s.last_offset DESC LIMIT 1;
        END IF;
        v_last := least(v_last, v_cur + v_left - 1);
        IF v_cur IS NULL OR v_last IS NULL OR v_last < v_cur THEN
            -- Nothing to deliver now. A cursor standing on messages that
            -- retention deleted moves past them: otherwise its old head time
            -- would put this partition first in every pop, for nothing.
            IF v_cur > c.cur THEN
                UPDATE queenside.cursors cu
                   SET committed = v_cur, head_at = queenside.cursor_head(c.pid, v_cur),
                       delivered_to = ARRAY(SELECT x FROM unnest(c.delivered_to) x WHERE x >= v_cur ORDER BY x),
                       fail_offsets = ARRAY(SELECT o FROM unnest(c.fail_offsets, c.fail_counts) f(o, n) WHERE o >= v_cur ORDER BY o),
                       fail_counts = ARRAY(SELECT n FROM unnest(c.fail_offsets, c.fail_counts) f(o, n) WHERE o >= v_cur ORDER BY o)
                 WHERE cu.group_id = p_group AND cu.partition_id = c.pid;
            END IF;
            CONTINUE;
        END IF;
        v_left := v_left - (v_last - v_cur + 1)::integer;

        SELECT max(x) INTO v_seen FROM unnest(c.delivered_to) x;
        v_delivered := ARRAY(SELECT x FROM unnest(c.delivered_to) x WHERE x >= v_cur ORDER BY x);
        IF p_auto_ack THEN
            v_lease := NULL; v_expires := NULL; v_attempts := NULL;
            UPDATE queenside.cursors cu
               SET committed = v_last + 1, head_at = queenside.cursor_head(c.pid, v_last + 1),
                   lease_id = NULL, lease_done = NULL,
                   delivered_to = ARRAY(SELECT x FROM unnest(v_delivered) x WHERE x > v_last),
                   fail_offsets = ARRAY(SELECT o FROM unnest(c.fail_offsets, c.fail_counts) f(o, n) WHERE o > v_last ORDER BY o),
                   fail_counts = ARRAY(SELECT n FROM unnest(c.fail_offsets, c.fail_counts) f(o, n) WHERE o > v_last ORDER BY o)
             WHERE cu.group_id = p_group AND cu.partition_id = c.pid;
        ELSE
            v_lease := gen_random_uuid();
            v_expires := v_now + v_lease_len;
            -- Keep the newest thousand leases: a crash-looping consumer must
            -- not grow the row without bound (the count then saturates).
            v_delivered := (v_delivered || v_last)[greatest(1, cardinality(v_delivered) - 998):];
            v_attempts := cardinality(v_delivered);
            UPDATE queenside.cursors cu
               SET committed = v_cur,
                   head_at = CASE WHEN v_cur = c.committed THEN c.head_at ELSE queenside.cursor_head(c.pid, v_cur) END,
                   lease_id = v_lease, lease_from = v_cur, lease_to = v_last,
                   lease_expires_at = v_expires, lease_done = '{}', delivered_to = v_delivered
             WHERE cu.group_id = p_group AND cu.partition_id = c.pid;
        END IF;

        -- One row per segment, holding its messages from v_cur to v_last:
        -- the caller unpacks the arrays, which costs far less here than a
        -- row per message. A segment taken whole is passed as it is.
        RETURN QUERY
        SELECT c.pid, c.pname, v_lease, v_cur, v_last, v_expires, v_attempts, coalesce(v_seen, -1),
               r.lo, s.committed_at,
               CASE WHEN r.whole THEN s.message_ids ELSE s.message_ids[r.i:r.j] END,
               CASE WHEN r.whole THEN s.transaction_ids ELSE s.transaction_ids[r.i:r.j] END,
               CASE WHEN r.whole THEN s.payloads ELSE s.payloads[r.i:r.j] END,
               CASE WHEN r.whole THEN s.trace_ids ELSE s.trace_ids[r.i:r.j] END,
               CASE WHEN r.whole THEN s.headers ELSE s.headers[r.i:r.j] END
          FROM queenside.segments s
         CROSS JOIN LATERAL (
               SELECT greatest(s.base_offset, v_cur) AS lo,
                      (greatest(s.base_offset, v_cur) - s.base_offset + 1)::integer AS i,
                      (least(s.last_offset, v_last) - s.base_offset + 1)::integer AS j,
                      s.base_offset >= v_cur AND s.last_offset <= v_last AS whole) r
         WHERE s.partition_id = c.pid AND s.last_offset >= v_cur AND s.base_offset <= v_last
           -- Up to the segment holding v_last, and no further: the index
           -- scan stops there instead of reading the partition to its end.
           AND s.last_offset <= (SELECT e.last_offset FROM queenside.segments e
                                  WHERE e.partition_id = c.pid AND e.last_offset >= v_last
                                  ORDER BY e.last_offset LIMIT 1)
         ORDER BY s.last_offset;
        -- The janitor deleted the whole run since v_cur was read (retention
        -- reached the group's position): nothing was delivered, so nothing
        -- stays leased, and the next pop skips what is gone.
        IF NOT FOUND AND NOT p_auto_ack THEN
            UPDATE queenside.cursors cu
               SET lease_id = NULL, lease_done = NULL,
                   delivered_to = ARRAY(SELECT x FROM unnest(c.delivered_to) x WHERE x >= v_cur ORDER BY x)
             WHERE cu.group_id = p_group AND cu.partition_id = c.pid;
            v_left := v_left + (v_last - v_cur + 1)::integer;
        END IF;
    END LOOP;
END;
$$;
