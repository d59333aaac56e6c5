-- queenside storage, version 7: the live queue. Producers and consumers at
-- once over many partitions, each partition a trickle: every message a pop
-- serves and an ack moves is alone in its partition, so what a call costs
-- beyond its rows, and what each row costs, is most of what a message costs
-- (BENCHMARKS.md, "The live queue").
--
-- Cursors are keyed by (partition, group), and have no other index on the
-- partition. A cursor row is rewritten by every pop and ack, and by a push
-- when its group waits at the end of the partition; each rewrite that moves
-- its head time (most of them) puts a new entry in every index of the
-- table. Keyed by partition first, the primary key also serves push's
-- look-up of a partition's cursors, so one index less takes those entries,
-- and the look-ups go through a unique index, which keeps fewer dead
-- entries: 100 cursors marked and cleared as a push and an ack do cost 1.5
-- ms against 2.8 to 3.9 ms with the two indexes (pgbench, alternating).
-- Statements that read a group's cursors alone (stats, seek, listing
-- groups, deleting one) scan the table's cursors instead; they are not on
-- the hot path. Rebuilding the key reads the table once, under a lock pops
-- and acks wait for: about a second per million cursors.
ALTER TABLE queenside.cursors DROP CONSTRAINT cursors_pkey;
ALTER TABLE queenside.cursors ADD PRIMARY KEY (partition_id, group_id);
DROP INDEX queenside.cursors_partition;

-- pop (0006) ran five to eight statements for every partition it served,
-- so a pop of ten partitions holding a message each cost PostgreSQL about
-- 1.1 ms. pop_many runs four statements whatever the number of partitions
-- (the group's options, its subscription's start, the partitions it takes,
-- locked, and one statement that reads their messages and moves their
-- cursors), and serves several pops at once: the sidecar gathers the pops
-- of a group that wait at the same moment into one call. pop is kept as it
-- was: a sidecar of the previous release calls it.

-- pop_many delivers messages to a group for several requests at once. The
-- k-th request wants up to p_batches[k] messages from up to
-- p_partitions[k] partitions; the ready partitions go to the requests in
-- turn, the one whose next message has waited longest first, so the first
-- request gets the oldest, and a request takes partitions until it has its
-- number of them or its messages. Each row is a run of one segment's
-- messages for one request (request is k), as pop's rows are; rows come in
-- no particular order: serve_order is the partition's place in the order it
-- was served, and first_offset orders a partition's runs. Everything else is as pop: a partition with a live lease
-- of the group is skipped, the row lock (SKIP LOCKED) and the recheck
-- under it keep two pops from leasing one partition, with p_auto_ack the
-- cursor moves past what is read and no lease is made, and a cursor behind
-- the first retained message starts there.
CREATE FUNCTION queenside.pop_many(p_group bigint, p_partition bigint, p_partitions integer[],
                                   p_batches integer[], p_lease_seconds integer, p_auto_ack boolean)
RETURNS TABLE (request integer, serve_order integer, partition_id bigint, partition_name text, lease_id uuid,
               lease_from bigint, lease_to bigint, lease_expires_at timestamptz, head_attempts integer,
               seen_to bigint, first_offset bigint, committed_at timestamptz, message_ids uuid[],
               transaction_ids text[], payloads bytea[], trace_ids text[], headers bytea[])
LANGUAGE plpgsql
-- The partitions to take come from cursors_ready in its order (0002), and
-- everything else is a lookup by key: no sort, scan of a whole table or
-- JIT is ever the better plan here, so the generic plans are kept (see
-- 0006 on plans made anew at every call).
SET enable_sort = off
SET enable_seqscan = off
SET enable_bitmapscan = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_start_at  timestamptz;
    v_delay     interval;
    v_lease_len interval;
    v_now       timestamptz := now();
    v_expires   timestamptz;
    v_want      integer := 0;
    -- The partitions taken, in the order they are served: each one's
    -- cursor, last deliverable offset, last offset delivered before, and
    -- first message retained from the cursor on.
    c_pid   bigint[];
    c_name  text[];
    c_cur   bigint[];
    c_last  bigint[];
    c_seen  bigint[];
    c_first bigint[];
    -- Which request each partition goes to (0: none, it has nothing to
    -- deliver now), the last offset of its span, and its lease.
    a_req   integer[];
    a_hi    bigint[];
    a_lease uuid[];
    k       integer;
    r       integer := 1;
    r_parts integer := 0;
    r_left  integer;
BEGIN
    SELECT g.start_at, make_interval(secs => q.delay_seconds),
           make_interval(secs => coalesce(p_lease_seconds, q.lease_seconds))
      INTO v_start_at, v_delay, v_lease_len
      FROM queenside.groups g JOIN queenside.queues q ON q.id = g.queue_id
     WHERE g.id = p_group;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'queenside: group % does not exist', p_group USING ERRCODE = 'no_data_found';
    END IF;
    v_expires := v_now + v_lease_len;
    FOR k IN 1 .. cardinality(p_partitions) LOOP
        v_want := v_want + p_partitions[k];
    END LOOP;

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
    -- Without a delay everything up to a partition's end is deliverable;
    -- with one, up to its last segment committed long enough ago (commit
    -- times grow with offsets). A pop of one partition looks it up by key,
    -- which one statement for both cases would not do once its plan is
    -- generic: hence two statements that differ in their WHERE only.
    IF p_partition IS NULL THEN
        SELECT array_agg(t.partition_id), array_agg(t.name), array_agg(t.committed),
               array_agg(t.last), array_agg(t.seen), array_agg(t.first)
          INTO c_pid, c_name, c_cur, c_last, c_seen, c_first
          FROM (SELECT cu.partition_id, p.name, cu.committed,
                       CASE WHEN v_delay = interval '0' THEN p.next_offset - 1
                            ELSE (SELECT s.last_offset FROM queenside.segments s
                                   WHERE s.partition_id = cu.partition_id AND s.committed_at <= v_now - v_delay
                                   ORDER BY s.last_offset DESC LIMIT 1) END AS last,
                       coalesce((SELECT max(d) FROM unnest(cu.delivered_to) d), -1) AS seen,
                       (SELECT s.base_offset FROM queenside.segments s
                         WHERE s.partition_id = cu.partition_id AND s.last_offset >= cu.committed
                         ORDER BY s.last_offset LIMIT 1) AS first
                  FROM queenside.cursors cu
                  JOIN queenside.partitions p ON p.id = cu.partition_id
                 WHERE cu.group_id = p_group
                   AND cu.head_at IS NOT NULL AND cu.head_at <= v_now - v_delay
                   AND (cu.lease_id IS NULL OR cu.lease_expires_at <= v_now)
                   AND p.next_offset > cu.committed
                 ORDER BY cu.head_at, cu.partition_id
                 LIMIT v_want
                   FOR UPDATE OF cu SKIP LOCKED) t;
    ELSE
        SELECT array_agg(t.partition_id), array_agg(t.name), array_agg(t.committed),
               array_agg(t.last), array_agg(t.seen), array_agg(t.first)
          INTO c_pid, c_name, c_cur, c_last, c_seen, c_first
          FROM (SELECT cu.partition_id, p.name, cu.committed,
                       CASE WHEN v_delay = interval '0' THEN p.next_offset - 1
                            ELSE (SELECT s.last_offset FROM queenside.segments s
                                   WHERE s.partition_id = cu.partition_id AND s.committed_at <= v_now - v_delay
                                   ORDER BY s.last_offset DESC LIMIT 1) END AS last,
                       coalesce((SELECT max(d) FROM unnest(cu.delivered_to) d), -1) AS seen,
                       (SELECT s.base_offset FROM queenside.segments s
                         WHERE s.partition_id = cu.partition_id AND s.last_offset >= cu.committed
                         ORDER BY s.last_offset LIMIT 1) AS first
                  FROM queenside.cursors cu
                  JOIN queenside.partitions p ON p.id = cu.partition_id
                 WHERE cu.group_id = p_group AND cu.partition_id = p_partition
                   AND cu.head_at IS NOT NULL AND cu.head_at <= v_now - v_delay
                   AND (cu.lease_id IS NULL OR cu.lease_expires_at <= v_now)
                   AND p.next_offset > cu.committed
                   FOR UPDATE OF cu SKIP LOCKED) t;
    END IF;
    IF c_pid IS NULL THEN
        RETURN;
    END IF;

    -- The partitions go to the requests in turn, each span counted from
    -- its cursor (it starts later when retention deleted messages under
    -- the cursor, and then delivers fewer).
    a_req := array_fill(0, ARRAY[cardinality(c_pid)]);
    a_hi := array_fill(NULL::bigint, ARRAY[cardinality(c_pid)]);
    a_lease := array_fill(NULL::uuid, ARRAY[cardinality(c_pid)]);
    r_left := p_batches[1];
    FOR k IN 1 .. cardinality(c_pid) LOOP
        EXIT WHEN r > cardinality(p_batches);
        a_hi[k] := least(c_last[k], c_cur[k] + r_left - 1);
        CONTINUE WHEN a_hi[k] IS NULL OR a_hi[k] < c_cur[k]; -- nothing deliverable yet (a delay)
        a_req[k] := r;
        IF NOT p_auto_ack THEN
            a_lease[k] := gen_random_uuid();
        END IF;
        r_left := r_left - (a_hi[k] - c_cur[k] + 1)::integer;
        r_parts := r_parts + 1;
        IF r_left <= 0 OR r_parts >= p_partitions[r] THEN
            r := r + 1;
            r_left := p_batches[r];
            r_parts := 0;
        END IF;
    END LOOP;

    -- Where the message at the cursor is retained, the usual case, one
    -- statement reads each span and leases it (or, with auto-ack, moves the
    -- cursor past it), in one snapshot: what is leased is what is read.
    -- Retention deletes a prefix of a partition, so a cursor whose message
    -- is still there has its whole span there; one whose message went
    -- since the partitions were taken is left for the next pop.
    RETURN QUERY
    WITH a AS (
        SELECT x.*
          FROM unnest(a_req, c_pid, c_name, c_cur, a_hi, c_last, c_seen, a_lease, c_first)
               WITH ORDINALITY AS x (req, pid, pname, cur, hi, last, seen, lease, first, ord)
         WHERE x.req <> 0 AND x.first <= x.cur
    ), moved AS (
        UPDATE queenside.cursors cu
           SET committed = CASE WHEN p_auto_ack THEN a.hi + 1 ELSE cu.committed END,
               head_at = CASE WHEN p_auto_ack THEN queenside.cursor_head(a.pid, a.hi + 1) ELSE cu.head_at END,
               lease_id = a.lease, lease_from = a.cur, lease_to = a.hi,
               lease_expires_at = CASE WHEN p_auto_ack THEN NULL ELSE v_expires END,
               lease_done = CASE WHEN p_auto_ack THEN NULL ELSE '{}'::bigint[] END,
               -- Every entry is at or past the cursor (an ack keeps no
               -- other), so a lease only appends. Keep the newest thousand
               -- leases: a crash-looping consumer must not grow the row
               -- without bound (the count then saturates).
               delivered_to = CASE
                   WHEN NOT p_auto_ack THEN (cu.delivered_to || a.hi)[greatest(1, cardinality(cu.delivered_to) - 998):]
                   WHEN cardinality(cu.delivered_to) = 0 THEN cu.delivered_to
                   ELSE ARRAY(SELECT x FROM unnest(cu.delivered_to) x WHERE x > a.hi ORDER BY x) END,
               fail_offsets = CASE WHEN NOT p_auto_ack OR cardinality(cu.fail_offsets) = 0 THEN cu.fail_offsets
                   ELSE ARRAY(SELECT o FROM unnest(cu.fail_offsets) o WHERE o > a.hi ORDER BY o) END,
               fail_counts = CASE WHEN NOT p_auto_ack OR cardinality(cu.fail_offsets) = 0 THEN cu.fail_counts
                   ELSE ARRAY(SELECT fc.n FROM unnest(cu.fail_offsets, cu.fail_counts) fc (o, n)
                               WHERE fc.o > a.hi ORDER BY fc.o) END
          FROM a
         WHERE cu.partition_id = a.pid AND cu.group_id = p_group
           AND (SELECT s.base_offset FROM queenside.segments s
                 WHERE s.partition_id = a.pid AND s.last_offset >= a.cur
                 ORDER BY s.last_offset LIMIT 1) <= a.cur
        RETURNING cu.partition_id, cardinality(cu.delivered_to) AS attempts
    )
    SELECT a.req, a.ord::integer, a.pid, a.pname, a.lease, a.cur, a.hi,
           CASE WHEN p_auto_ack THEN NULL ELSE v_expires END,
           CASE WHEN p_auto_ack THEN NULL ELSE m.attempts END, a.seen,
           r.lo, s.committed_at,
           CASE WHEN r.whole THEN s.message_ids ELSE s.message_ids[r.i:r.j] END,
           CASE WHEN r.whole THEN s.transaction_ids ELSE s.transaction_ids[r.i:r.j] END,
           CASE WHEN r.whole THEN s.payloads ELSE s.payloads[r.i:r.j] END,
           CASE WHEN r.whole THEN s.trace_ids ELSE s.trace_ids[r.i:r.j] END,
           CASE WHEN r.whole THEN s.headers ELSE s.headers[r.i:r.j] END
      FROM a
      JOIN moved m ON m.partition_id = a.pid
      -- Up to the segment holding the span's last offset, and no further.
      -- A span to the last deliverable offset ends where a segment does
      -- (the partition's end, or the last segment old enough): no look-up.
     CROSS JOIN LATERAL (
           SELECT CASE WHEN a.hi = a.last THEN a.hi
                       ELSE (SELECT e.last_offset FROM queenside.segments e
                              WHERE e.partition_id = a.pid AND e.last_offset >= a.hi
                              ORDER BY e.last_offset LIMIT 1) END AS stop) e
     CROSS JOIN LATERAL (SELECT s.* FROM queenside.segments s
                          WHERE s.partition_id = a.pid AND s.last_offset >= a.cur AND s.last_offset <= e.stop
                            AND s.base_offset <= a.hi
                          ORDER BY s.last_offset) s
     CROSS JOIN LATERAL (
           SELECT greatest(s.base_offset, a.cur) AS lo,
                  (greatest(s.base_offset, a.cur) - s.base_offset + 1)::integer AS i,
                  (least(s.last_offset, a.hi) - s.base_offset + 1)::integer AS j,
                  s.base_offset >= a.cur AND s.last_offset <= a.hi AS whole) r;

    -- A cursor standing on messages that retention deleted: the span starts
    -- at the first message retained, and is leased only if anything of it
    -- is read in this statement's snapshot. With nothing to deliver, the
    -- cursor moves past what is gone: otherwise its old head time would put
    -- it first in every pop, for nothing.
    IF EXISTS (SELECT 1 FROM unnest(c_cur, c_first) AS x (cur, first) WHERE x.first IS NULL OR x.first > x.cur) THEN
        RETURN QUERY
        WITH a AS (
            -- Where each span starts: at its cursor, or at the first message
            -- retained from there on (past the end when there is none).
            SELECT x.*, greatest(x.cur, coalesce(f.base_offset, (SELECT n.next_offset FROM queenside.partitions n
                                                                   WHERE n.id = x.pid))) AS lo
              FROM unnest(a_req, c_pid, c_name, c_cur, a_hi, c_last, c_seen, a_lease, c_first)
                   WITH ORDINALITY AS x (req, pid, pname, cur, hi, last, seen, lease, first, ord)
              LEFT JOIN LATERAL (SELECT s.base_offset FROM queenside.segments s
                                  WHERE s.partition_id = x.pid AND s.last_offset >= x.cur
                                  ORDER BY s.last_offset LIMIT 1) f ON true
             WHERE x.first IS NULL OR x.first > x.cur
        ), moved AS (
            UPDATE queenside.cursors cu
               SET committed = CASE WHEN a.req = 0 OR a.lo > a.hi THEN a.lo WHEN p_auto_ack THEN a.hi + 1 ELSE a.lo END,
                   head_at = CASE WHEN a.req <> 0 AND a.lo <= a.hi AND NOT p_auto_ack AND a.lo = cu.committed
                                       THEN cu.head_at
                                  WHEN a.req <> 0 AND a.lo <= a.hi AND p_auto_ack
                                       THEN queenside.cursor_head(a.pid, a.hi + 1)
                                  ELSE queenside.cursor_head(a.pid, a.lo) END,
                   lease_id = CASE WHEN a.req = 0 OR a.lo > a.hi THEN cu.lease_id ELSE a.lease END,
                   lease_from = CASE WHEN a.req = 0 OR a.lo > a.hi THEN cu.lease_from ELSE a.lo END,
                   lease_to = CASE WHEN a.req = 0 OR a.lo > a.hi THEN cu.lease_to ELSE a.hi END,
                   lease_expires_at = CASE WHEN a.req = 0 OR a.lo > a.hi THEN cu.lease_expires_at
                                           WHEN p_auto_ack THEN NULL ELSE v_expires END,
                   lease_done = CASE WHEN a.req = 0 OR a.lo > a.hi THEN cu.lease_done
                                     WHEN p_auto_ack THEN NULL ELSE '{}' END,
                   -- Every entry is at or past the cursor (an ack keeps no
                   -- other), so a lease from the cursor only appends. Keep the
                   -- newest thousand leases: a crash-looping consumer must not
                   -- grow the row without bound (the count then saturates).
                   delivered_to = CASE
                       WHEN a.req = 0 OR a.lo > a.hi
                            THEN ARRAY(SELECT x FROM unnest(cu.delivered_to) x WHERE x >= a.lo ORDER BY x)
                       WHEN p_auto_ack THEN ARRAY(SELECT x FROM unnest(cu.delivered_to) x WHERE x > a.hi ORDER BY x)
                       WHEN a.lo = cu.committed
                            THEN (cu.delivered_to || a.hi)[greatest(1, cardinality(cu.delivered_to) - 998):]
                       ELSE (SELECT d.v[greatest(1, cardinality(d.v) - 998):]
                               FROM (SELECT ARRAY(SELECT x FROM unnest(cu.delivered_to) x WHERE x >= a.lo ORDER BY x)
                                            || a.hi AS v) d) END,
                   fail_offsets = CASE WHEN cardinality(cu.fail_offsets) = 0 THEN cu.fail_offsets
                       ELSE ARRAY(SELECT o FROM unnest(cu.fail_offsets) o
                                   WHERE o >= CASE WHEN a.req <> 0 AND a.lo <= a.hi AND p_auto_ack THEN a.hi + 1
                                                   ELSE a.lo END
                                   ORDER BY o) END,
                   fail_counts = CASE WHEN cardinality(cu.fail_offsets) = 0 THEN cu.fail_counts
                       ELSE ARRAY(SELECT fc.n FROM unnest(cu.fail_offsets, cu.fail_counts) fc (o, n)
                                   WHERE fc.o >= CASE WHEN a.req <> 0 AND a.lo <= a.hi AND p_auto_ack THEN a.hi + 1
                                                      ELSE a.lo END
                                   ORDER BY fc.o) END
              FROM a
             WHERE cu.partition_id = a.pid AND cu.group_id = p_group
               AND ((a.req <> 0 AND a.lo <= a.hi) OR a.lo > a.cur)
            RETURNING cu.partition_id, cardinality(cu.delivered_to) AS attempts
        )
        SELECT a.req, a.ord::integer, a.pid, a.pname, a.lease, a.lo, a.hi,
               CASE WHEN p_auto_ack THEN NULL ELSE v_expires END,
               CASE WHEN p_auto_ack THEN NULL ELSE m.attempts END, a.seen,
               r.lo, s.committed_at,
               CASE WHEN r.whole THEN s.message_ids ELSE s.message_ids[r.i:r.j] END,
               CASE WHEN r.whole THEN s.transaction_ids ELSE s.transaction_ids[r.i:r.j] END,
               CASE WHEN r.whole THEN s.payloads ELSE s.payloads[r.i:r.j] END,
               CASE WHEN r.whole THEN s.trace_ids ELSE s.trace_ids[r.i:r.j] END,
               CASE WHEN r.whole THEN s.headers ELSE s.headers[r.i:r.j] END
          FROM a
          JOIN moved m ON m.partition_id = a.pid
          -- Up to the segment holding the span's last offset, and no further.
          -- A span to the last deliverable offset ends where a segment does
          -- (the partition's end, or the last segment old enough): no look-up.
         CROSS JOIN LATERAL (
               SELECT CASE WHEN a.hi = a.last THEN a.hi
                           ELSE (SELECT e.last_offset FROM queenside.segments e
                                  WHERE e.partition_id = a.pid AND e.last_offset >= a.hi
                                  ORDER BY e.last_offset LIMIT 1) END AS stop) e
         CROSS JOIN LATERAL (SELECT s.* FROM queenside.segments s
                              WHERE s.partition_id = a.pid AND s.last_offset >= a.lo AND s.last_offset <= e.stop
                                AND s.base_offset <= a.hi
                              ORDER BY s.last_offset) s
         CROSS JOIN LATERAL (
               SELECT greatest(s.base_offset, a.lo) AS lo,
                      (greatest(s.base_offset, a.lo) - s.base_offset + 1)::integer AS i,
                      (least(s.last_offset, a.hi) - s.base_offset + 1)::integer AS j,
                      s.base_offset >= a.lo AND s.last_offset <= a.hi AS whole) r
         WHERE a.req <> 0 AND a.lo <= a.hi;
    END IF;
END;
$$;

-- ack_call, as in 0005, with the same answers, at less cost a lease. A call
-- whose items all complete messages named by offset, nearly every call,
-- takes no lock beforehand: the update of the leases acked whole locks
-- their cursors as it goes, in (partition, group) order, and only the
-- leases it did not apply are locked again, in order, by the per-lease
-- path. The arrays of a cursor's deliveries and failures are rewritten only
-- when there is something in them to drop.
CREATE OR REPLACE FUNCTION queenside.ack_call(p_groups bigint[], p_partitions bigint[], p_leases uuid[],
                                              p_slots integer[], p_offsets bigint[], p_hashes uuid[],
                                              p_failed boolean[], p_errors text[])
RETURNS TABLE (idx integer, success boolean, code text, dead_lettered boolean, released boolean, cursor_offset bigint)
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_fast  integer[]; -- slots applied by the set-based update
    v_cur   bigint[];  -- and the cursor each now stands at
    v_items integer[];
    k       integer;
BEGIN
    -- Some item fails a message, or names it by transaction id: every
    -- cursor of the call is locked first, in (partition, group) order, so
    -- two calls can never deadlock (ack locks its row again: a no-op).
    IF p_hashes IS NOT NULL OR true = ANY (p_failed) OR array_position(p_offsets, NULL) IS NOT NULL THEN
        PERFORM 1 FROM queenside.cursors cu
          JOIN unnest(p_groups, p_partitions) AS l (g, p) ON cu.group_id = l.g AND cu.partition_id = l.p
         ORDER BY cu.partition_id, cu.group_id
           FOR UPDATE OF cu;
    END IF;

    -- The common case. Completed offsets forming a gapless run lo..hi, with
    -- lo between the lease's start and the cursor and hi its last offset,
    -- move the cursor to hi + 1 exactly as ack would: the run covers the
    -- cursor's own message (so no message deleted by retention is in the
    -- way), and every completion remembered past a gap lies inside it. The
    -- runs come in key order, and the update takes them in that order.
    WITH runs AS (
        SELECT r.* FROM (
            SELECT u.s, p_groups[u.s] AS g, p_partitions[u.s] AS p, p_leases[u.s] AS lease,
                   min(u.o) AS lo, max(u.o) AS hi, count(DISTINCT u.o) AS n,
                   bool_and(NOT u.f AND u.o IS NOT NULL) AS plain
              FROM unnest(p_slots, p_offsets, p_failed) AS u (s, o, f)
             GROUP BY u.s) r
         WHERE r.plain AND r.hi - r.lo + 1 = r.n
         ORDER BY r.p, r.g
    ), done AS (
        UPDATE queenside.cursors cu
           SET committed = r.hi + 1,
               -- cursor_head (0006), written out: a function call per lease
               -- cost more than the rest of the update. A message past the
               -- new cursor is there to look up. At the end of the
               -- partition, as this statement sees it, the partition's row
               -- is share-locked without waiting: not taken, a push is in
               -- flight and the head is now, which keeps the cursor in
               -- pop's view; taken, the row's latest version shows a push
               -- committed since (its time is the head), and otherwise no
               -- push can commit before this transaction does, so the next
               -- one finds the cursor waiting at the end and gives it its
               -- head.
               head_at = CASE WHEN r.hi + 1 < p.next_offset
                              THEN (SELECT s.committed_at FROM queenside.segments s
                                     WHERE s.partition_id = r.p AND s.last_offset >= r.hi + 1
                                     ORDER BY s.last_offset LIMIT 1)
                              WHEN lk.id IS NULL THEN now()
                              WHEN lk.next_offset > r.hi + 1 THEN lk.last_committed_at END,
               lease_id = NULL, lease_done = NULL,
               delivered_to = CASE WHEN cardinality(cu.delivered_to) = 0 THEN cu.delivered_to
                   ELSE ARRAY(SELECT x FROM unnest(cu.delivered_to) x WHERE x > r.hi ORDER BY x) END,
               fail_offsets = CASE WHEN cardinality(cu.fail_offsets) = 0 THEN cu.fail_offsets
                   ELSE ARRAY(SELECT o FROM unnest(cu.fail_offsets) o WHERE o > r.hi ORDER BY o) END,
               fail_counts = CASE WHEN cardinality(cu.fail_offsets) = 0 THEN cu.fail_counts
                   ELSE ARRAY(SELECT c FROM unnest(cu.fail_offsets, cu.fail_counts) f (o, c)
                               WHERE o > r.hi ORDER BY o) END
          FROM runs r
          JOIN queenside.partitions p ON p.id = r.p
          LEFT JOIN LATERAL (SELECT l.id, l.next_offset, l.last_committed_at FROM queenside.partitions l
                              WHERE l.id = r.p AND r.hi + 1 >= p.next_offset
                                FOR SHARE SKIP LOCKED) lk ON true
         WHERE cu.partition_id = r.p AND cu.group_id = r.g
           AND cu.lease_id = r.lease AND cu.lease_expires_at > now()
           AND r.hi = cu.lease_to AND r.lo >= cu.lease_from AND r.lo <= cu.committed
        RETURNING r.s, r.hi + 1 AS cur
    )
    SELECT array_agg(d.s), array_agg(d.cur) INTO v_fast, v_cur FROM done d;

    RETURN QUERY
    SELECT u.i::integer, true, NULL::text, false, true, f.cur
      FROM unnest(p_slots) WITH ORDINALITY AS u (s, i)
      JOIN unnest(v_fast, v_cur) AS f (s, cur) ON f.s = u.s;

    -- The rest, lease by lease in (partition, group) order.
    FOR k IN
        SELECT l.k FROM unnest(p_groups, p_partitions) WITH ORDINALITY AS l (g, p, k)
         WHERE v_fast IS NULL OR NOT (l.k::integer = ANY (v_fast))
         ORDER BY l.p, l.g
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
