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
-- cursors; a fifth only when retention deleted messages under a cursor),
-- and serves several pops at once: the sidecar gathers the pops of a group
-- that wait at the same moment into one call. pop is kept as it was: a
-- sidecar of the previous release calls it, and the sidecar still calls
-- it for one request of one partition, where its per-partition statements
-- cost less than pop_many's.

-- pop_many delivers messages to a group for several requests at once. The
-- k-th request wants up to p_batches[k] messages from up to
-- p_partitions[k] partitions; the ready partitions go to the requests in
-- turn, the one whose next message has waited longest first, so the first
-- request gets the oldest, and a request takes partitions until it has its
-- number of them or its messages. Each row is a run of one segment's
-- messages for one request (request is k), as pop's rows are; rows come in
-- no particular order: serve_order is the partition's place in the order
-- it was served, and first_offset orders a partition's runs. Everything
-- else is as pop: a partition with a live lease of the group is skipped,
-- the row lock (SKIP LOCKED) and the recheck under it keep two pops from
-- leasing one partition, with p_auto_ack the cursor moves past what is read
-- and no lease is made, and a cursor behind the first retained message
-- starts there.
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

-- The duplicate probe finds a message by its partition and transaction id
-- hash in one bucket read. The hash index of 0005 was on the hash alone, so
-- a probe read every row of that hash, in every partition: transaction ids
-- that repeat across partitions (a sequence number per partition, say, or
-- an order id pushed to several queues) made each probe read hundreds of
-- rows, and pushes slowed as the table grew (39 ms a probe of 100 messages
-- over 3.3 million rows of 4,382 distinct hashes, in make verify). The index
-- is now on a 64-bit hash of both, and every statement that looks a row up
-- by partition and hash names it (collisions only cost a recheck). Building
-- it reads the table under a lock pushes wait for: about 2 s per million
-- rows kept.
CREATE INDEX dedup_key ON queenside.dedup USING hash (uuid_hash_extended(hash, partition_id));
DROP INDEX queenside.dedup_hash;

-- The functions that look a row of dedup up by partition and hash, as they
-- were (push 0006, push_general 0005, ack, purge_dedup and
-- purge_orphan_hashes 0003), naming the key.
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
             JOIN queenside.dedup d ON uuid_hash_extended(d.hash, d.partition_id) = uuid_hash_extended(u.h, p_ids[u.s]) AND d.hash = u.h AND d.partition_id = p_ids[u.s]) THEN
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
                WHERE uuid_hash_extended(d.hash, d.partition_id) = uuid_hash_extended(u.h, p_ids[u.s]) AND
                      d.partition_id = p_ids[u.s] AND d.hash = u.h AND d.msg_offset < bases[u.s]
                LIMIT 1) d
         WHERE coalesce(u.l, u.o) = u.o;
    END IF;

    -- Wake the pops waiting on these queues, on every sidecar. Delivered
    -- at commit; identical notifications of one transaction fold into one.
    PERFORM queenside.wake(w) FROM unnest(v_queues) AS w;
END;
$$;

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
                                 WHERE uuid_hash_extended(d.hash, d.partition_id) = uuid_hash_extended(u.h, u.pid) AND
                                   d.partition_id = u.pid AND d.hash = u.h
                                   AND d.msg_offset < pt.base AND d.committed_at > pt.cutoff))
    ), replaced AS (
        -- A hash a stored message takes over: outside its window, or in a
        -- queue that does not deduplicate.
        DELETE FROM queenside.dedup d
         USING (SELECT DISTINCT f.pid, f.h FROM fresh f) x
         WHERE uuid_hash_extended(d.hash, d.partition_id) = uuid_hash_extended(x.h, x.pid) AND d.hash = x.h AND d.partition_id = x.pid
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

CREATE OR REPLACE FUNCTION queenside.ack(p_group bigint, p_partition bigint, p_lease uuid,
                              p_offsets bigint[], p_hashes uuid[], p_failed boolean[], p_errors text[])
RETURNS TABLE (idx integer, success boolean, code text, dead_lettered boolean, released boolean, cursor_offset bigint)
LANGUAGE plpgsql AS $$
DECLARE
    n         integer := cardinality(p_failed);
    c         queenside.cursors%ROWTYPE;
    v_queue   text;
    v_retry   integer;
    v_keep    interval;
    v_off     bigint[] := p_offsets;
    v_code    text[] := array_fill(NULL::text, ARRAY[n]);
    v_dead    boolean[] := array_fill(false, ARRAY[n]);
    v_fail    bigint;
    v_done    bigint[];
    v_cursor  bigint;
    v_from    bigint;
    v_written integer;
    v_release boolean := false;
    v_fo      bigint[];
    v_fc      integer[];
    v_count   integer;
    v_found   bigint;
    i         integer;
BEGIN
    SELECT * INTO c FROM queenside.cursors cu
     WHERE cu.group_id = p_group AND cu.partition_id = p_partition FOR UPDATE;
    IF NOT FOUND OR c.lease_id IS DISTINCT FROM p_lease OR c.lease_expires_at <= now() THEN
        RETURN QUERY SELECT g.i, false, 'lease_expired', false, false, c.committed FROM generate_series(1, n) g (i);
        RETURN;
    END IF;
    SELECT q.name, q.retry_limit,
           make_interval(secs => greatest(q.dedup_window_seconds, q.completed_retention_seconds, 900))
      INTO v_queue, v_retry, v_keep
      FROM queenside.partitions p JOIN queenside.queues q ON q.id = p.queue_id
     WHERE p.id = p_partition;

    -- Items named by transaction id: resolve them through the hashes still
    -- kept; one not found is unresolvable (and its message comes again).
    IF p_hashes IS NOT NULL THEN
        FOR i IN 1 .. n LOOP
            CONTINUE WHEN v_off[i] IS NOT NULL;
            v_found := NULL;
            SELECT d.msg_offset INTO v_found FROM queenside.dedup d
             WHERE uuid_hash_extended(d.hash, d.partition_id) = uuid_hash_extended(p_hashes[i], p_partition) AND
                   d.partition_id = p_partition AND d.hash = p_hashes[i] AND d.committed_at > now() - v_keep;
            v_off[i] := v_found;
        END LOOP;
    END IF;

    -- The lowest failure inside the lease clamps the cursor. Completed items
    -- at or above it are rewound, and so are completions remembered from
    -- earlier calls: everything from the failure on is delivered again.
    -- A failure below the cursor comes too late: that message was
    -- completed and the cursor passed it. It changes nothing, and says so.
    SELECT min(u.o) INTO v_fail FROM unnest(v_off, p_failed) AS u (o, f)
     WHERE u.f AND u.o BETWEEN greatest(c.lease_from, c.committed) AND c.lease_to;
    v_code := ARRAY(
        SELECT CASE WHEN u.o IS NULL THEN 'unresolvable'
                    WHEN u.o < c.lease_from OR u.o > c.lease_to THEN 'not_in_lease'
                    WHEN u.f AND u.o < c.committed THEN 'not_in_lease'
                    WHEN NOT u.f AND u.o >= v_fail THEN 'rewound' END
          FROM unnest(v_off, p_failed) WITH ORDINALITY AS u (o, f, i) ORDER BY u.i);
    v_done := ARRAY(SELECT x FROM unnest(coalesce(c.lease_done, '{}')) x WHERE v_fail IS NULL OR x < v_fail)
           || ARRAY(SELECT u.o FROM unnest(v_off, p_failed) AS u (o, f)
                     WHERE NOT u.f AND u.o BETWEEN c.lease_from AND c.lease_to
                       AND (v_fail IS NULL OR u.o < v_fail));

    -- The completed run starts at the cursor or, when retention deleted the
    -- cursor's message under the lease, at the first message retained: the
    -- group skips what is gone, as pop does. Looked up only when the
    -- cursor's own message is not among the completed, so the common ack
    -- pays nothing for it.
    v_from := c.committed;
    IF NOT (c.committed = ANY (v_done)) THEN
        v_from := greatest(c.committed, coalesce(
            (SELECT s.base_offset FROM queenside.segments s
              WHERE s.partition_id = p_partition AND s.last_offset >= c.committed
              ORDER BY s.last_offset LIMIT 1),
            (SELECT p.next_offset FROM queenside.partitions p WHERE p.id = p_partition)));
    END IF;
    -- The cursor moves over the completed run: among the distinct completed
    -- offsets from its start up, in order, the k-th is start+k-1 exactly as
    -- long as the run has no gap.
    SELECT v_from + count(*) INTO v_cursor
      FROM (SELECT x, row_number() OVER (ORDER BY x) AS rn
              FROM (SELECT DISTINCT x FROM unnest(v_done) x WHERE x >= v_from) d) r
     WHERE r.x = v_from + r.rn - 1;

    v_fo := c.fail_offsets;
    v_fc := c.fail_counts;
    IF v_fail IS NOT NULL THEN
        v_release := true;
        -- Charge every explicit failure of the call to its message.
        FOR i IN 1 .. n LOOP
            CONTINUE WHEN v_code[i] IS NOT NULL OR NOT p_failed[i];
            IF v_off[i] = ANY (v_fo) THEN
                v_fc[array_position(v_fo, v_off[i])] := v_fc[array_position(v_fo, v_off[i])] + 1;
            ELSE
                v_fo := v_fo || v_off[i];
                v_fc := v_fc || 1;
            END IF;
        END LOOP;
        v_count := v_fc[array_position(v_fo, v_fail)];
        IF v_fail = v_cursor AND v_count >= v_retry + 1 THEN
            INSERT INTO queenside.dead_letters (queue_id, partition_id, group_id, queue_name, partition_name, group_name,
                                                msg_offset, message_id, transaction_id, payload, trace_id, headers,
                                                error, failures, committed_at)
            SELECT q.id, p.id, g.id, q.name, p.name, g.name, v_fail,
                   s.message_ids[v_fail - s.base_offset + 1], s.transaction_ids[v_fail - s.base_offset + 1],
                   s.payloads[v_fail - s.base_offset + 1], s.trace_ids[v_fail - s.base_offset + 1],
                   s.headers[v_fail - s.base_offset + 1],
                   (SELECT p_errors[j] FROM generate_series(1, n) j
                     WHERE p_failed[j] AND v_code[j] IS NULL AND v_off[j] = v_fail LIMIT 1),
                   v_count, s.committed_at
              FROM queenside.segments s
              JOIN queenside.partitions p ON p.id = s.partition_id
              JOIN queenside.queues q ON q.id = p.queue_id
              JOIN queenside.groups g ON g.id = p_group
             WHERE s.partition_id = p_partition AND s.last_offset >= v_fail
             ORDER BY s.last_offset LIMIT 1;
            -- Nothing is written when retention deleted the message under
            -- the lease: it is skipped all the same, but not reported as a
            -- dead letter that does not exist.
            GET DIAGNOSTICS v_written = ROW_COUNT;
            FOR i IN 1 .. n LOOP
                IF v_written > 0 AND v_code[i] IS NULL AND p_failed[i] AND v_off[i] = v_fail THEN
                    v_dead[i] := true;
                END IF;
            END LOOP;
            v_cursor := v_fail + 1;
        END IF;
    ELSIF v_cursor > c.lease_to THEN
        v_release := true;
    END IF;

    UPDATE queenside.cursors cu
       SET committed = v_cursor,
           head_at = CASE WHEN v_cursor = c.committed THEN c.head_at
                          ELSE queenside.cursor_head(p_partition, v_cursor) END,
           lease_id = CASE WHEN v_release THEN NULL ELSE c.lease_id END,
           lease_done = CASE WHEN v_release THEN NULL
                             ELSE ARRAY(SELECT DISTINCT x FROM unnest(v_done) x WHERE x > v_cursor ORDER BY x) END,
           delivered_to = ARRAY(SELECT x FROM unnest(c.delivered_to) x WHERE x >= v_cursor ORDER BY x),
           fail_offsets = ARRAY(SELECT o FROM unnest(v_fo, v_fc) f (o, k) WHERE o >= v_cursor ORDER BY o),
           fail_counts = ARRAY(SELECT k FROM unnest(v_fo, v_fc) f (o, k) WHERE o >= v_cursor ORDER BY o)
     WHERE cu.group_id = p_group AND cu.partition_id = p_partition;

    -- A rewind makes messages deliverable again at once: wake waiting pops.
    IF v_fail IS NOT NULL THEN
        PERFORM queenside.wake(v_queue);
    END IF;

    RETURN QUERY
    SELECT g.i, v_code[g.i] IS NULL, v_code[g.i], v_dead[g.i], v_release, v_cursor
      FROM generate_series(1, n) g (i);
END;
$$;

CREATE OR REPLACE FUNCTION queenside.purge_dedup(p_from bigint, p_max_segments integer, p_max_messages integer,
                                      OUT next_from bigint, OUT segments integer, OUT messages bigint,
                                      OUT hashes bigint)
LANGUAGE plpgsql
-- Each hash is one primary key lookup: never a scan of dedup, whatever the
-- estimates of the arrays' sizes.
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
DECLARE
    v_now   timestamptz := now();
    w       record;
    v_due   bigint;
    v_bound bigint;
    v_cap   bigint;
    v_n     integer;
    v_m     bigint;
    v_h     bigint;
    v_to    bigint;
BEGIN
    segments := 0; messages := 0; hashes := 0;
    -- The partitions whose first segment above the mark is due.
    FOR w IN
        SELECT p.id, f.base_offset AS first_base, f.last_offset AS first_last,
               v_now - queenside.dedup_keep(q.dedup_window_seconds, q.completed_retention_seconds) AS cutoff
          FROM queenside.partitions p
          JOIN queenside.queues q ON q.id = p.queue_id
          LEFT JOIN queenside.dedup_marks m ON m.partition_id = p.id
         CROSS JOIN LATERAL (SELECT s.base_offset, s.last_offset, s.committed_at FROM queenside.segments s
                              WHERE s.partition_id = p.id AND s.last_offset >= coalesce(m.purged_to, 0)
                              ORDER BY s.last_offset LIMIT 1) f
         WHERE p.id >= p_from
           AND f.committed_at < v_now - queenside.dedup_keep(q.dedup_window_seconds, q.completed_retention_seconds)
         ORDER BY p.id
    LOOP
        IF segments >= p_max_segments OR messages >= p_max_messages THEN
            next_from := w.id;
            RETURN;
        END IF;
        v_due := queenside.first_offset_at(w.id, w.cutoff);
        v_bound := least(v_due, greatest(w.first_last + 1, w.first_base + (p_max_messages - messages)));
        v_cap := (SELECT s.last_offset FROM queenside.segments s
                   WHERE s.partition_id = w.id AND s.last_offset >= w.first_last AND s.last_offset < v_bound
                   ORDER BY s.last_offset OFFSET p_max_segments - segments - 1 LIMIT 1);
        IF v_cap IS NOT NULL THEN
            v_bound := v_cap + 1;
        END IF;
        -- A row is deleted by its own commit time: one taken over since by a
        -- later message with the same transaction id is that message's.
        WITH seg AS MATERIALIZED (
            SELECT s.last_offset, s.base_offset, s.transaction_ids FROM queenside.segments s
             WHERE s.partition_id = w.id AND s.last_offset >= w.first_last AND s.last_offset < v_bound
        ), gone AS (
            DELETE FROM queenside.dedup d
             USING (SELECT DISTINCT queenside.transaction_hash(t) AS h FROM seg, unnest(seg.transaction_ids) t) x
             WHERE uuid_hash_extended(d.hash, d.partition_id) = uuid_hash_extended(x.h, w.id) AND
                   d.partition_id = w.id AND d.hash = x.h AND d.committed_at < w.cutoff
            RETURNING 1
        )
        SELECT count(*), coalesce(sum(seg.last_offset - seg.base_offset + 1), 0), max(seg.last_offset),
               (SELECT count(*) FROM gone)
          INTO v_n, v_m, v_to, v_h
          FROM seg;
        INSERT INTO queenside.dedup_marks AS dm (partition_id, purged_to) VALUES (w.id, v_to + 1)
            ON CONFLICT (partition_id) DO UPDATE SET purged_to = greatest(dm.purged_to, excluded.purged_to);
        segments := segments + v_n;
        messages := messages + v_m;
        hashes := hashes + v_h;
        IF v_bound < v_due THEN
            next_from := w.id;
            RETURN;
        END IF;
    END LOOP;
END;
$$;

CREATE OR REPLACE FUNCTION queenside.purge_orphan_hashes(p_max_rows integer, p_max_hashes integer,
                                              OUT segments integer, OUT hashes bigint, OUT more boolean)
LANGUAGE plpgsql
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
DECLARE
    v_now timestamptz := now();
BEGIN
    WITH due AS MATERIALIZED (
        -- A partition that is gone (its queue deleted) keeps nothing.
        SELECT o.purge_after, o.partition_id, o.last_offset, o.committed_at, o.hashes,
               coalesce(v_now - queenside.dedup_keep(q.dedup_window_seconds, q.completed_retention_seconds),
                        'infinity') AS cutoff
          FROM (SELECT o.*, sum(cardinality(o.hashes)) OVER (ORDER BY o.purge_after, o.partition_id, o.last_offset)
                            - cardinality(o.hashes) AS before
                  FROM queenside.orphan_hashes o
                 WHERE o.purge_after < v_now
                 ORDER BY o.purge_after, o.partition_id, o.last_offset
                 LIMIT p_max_rows) o
          LEFT JOIN queenside.partitions p ON p.id = o.partition_id
          LEFT JOIN queenside.queues q ON q.id = p.queue_id
         WHERE o.before < p_max_hashes
    ), gone AS (
        -- The keys are worked out first (OFFSET 0 keeps the subquery whole),
        -- so that each is one look-up of dedup_key.
        DELETE FROM queenside.dedup d
         USING (SELECT due.partition_id, due.cutoff, h, uuid_hash_extended(h, due.partition_id) AS k
                  FROM due, unnest(due.hashes) h
                 WHERE due.committed_at < due.cutoff OFFSET 0) x
         WHERE uuid_hash_extended(d.hash, d.partition_id) = x.k AND
               d.partition_id = x.partition_id AND d.hash = x.h AND d.committed_at < x.cutoff
        RETURNING 1
    ), done AS (
        DELETE FROM queenside.orphan_hashes o
         USING due
         WHERE o.purge_after = due.purge_after AND o.partition_id = due.partition_id
           AND o.last_offset = due.last_offset AND due.committed_at < due.cutoff
        RETURNING 1
    ), postponed AS (
        -- The queue keeps its hashes longer than when the segment went.
        UPDATE queenside.orphan_hashes o
           SET purge_after = due.committed_at + (v_now - due.cutoff)
          FROM due
         WHERE o.purge_after = due.purge_after AND o.partition_id = due.partition_id
           AND o.last_offset = due.last_offset AND due.committed_at >= due.cutoff
        RETURNING 1
    )
    SELECT count(*), (SELECT count(*) FROM gone) INTO segments, hashes FROM due;
    more := EXISTS (SELECT 1 FROM queenside.orphan_hashes o WHERE o.purge_after < v_now);
END;
$$;

-- CREATE OR REPLACE resets a function's settings: as 0005 set them.
ALTER FUNCTION queenside.ack(bigint, bigint, uuid, bigint[], uuid[], boolean[], text[]) SET enable_seqscan = off;
ALTER FUNCTION queenside.purge_dedup(bigint, integer, integer) SET enable_seqscan = off;
ALTER FUNCTION queenside.purge_orphan_hashes(integer, integer) SET enable_seqscan = off;
