-- queenside storage, version 16: one function positions a subscription's
-- cursors (SCALING.md, section 4).
--
-- pop and pop_many each positioned the cursors of a subscription whose
-- start had come with the same UPDATE, which called first_offset_at and
-- cursor_head inside it: on Citus a function reading distributed tables
-- cannot be called inside a statement on one (R3, R6). position_cursors
-- does it for both, partition by partition by assignments, in partition id
-- order, each cursor updated only while it is still unpositioned, so a
-- cursor another pop positioned and moved meanwhile is not set back. The
-- signatures of pop and pop_many stay.

CREATE OR REPLACE FUNCTION queenside.position_cursors(p_group bigint, p_start_at timestamp with time zone)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_pid  bigint;
    v_cur  bigint;
    v_head timestamptz;
BEGIN
    -- Partition by partition, in id order, as acks lock cursors; a cursor
    -- positioned meanwhile by another pop is left as that pop left it.
    FOR v_pid IN SELECT cu.partition_id FROM queenside.cursors cu
                  WHERE cu.group_id = p_group AND cu.committed IS NULL
                  ORDER BY cu.partition_id LOOP
        v_cur := queenside.first_offset_at(v_pid, p_start_at);
        v_head := queenside.cursor_head(v_pid, v_cur);
        UPDATE queenside.cursors cu SET committed = v_cur, head_at = v_head
         WHERE cu.group_id = p_group AND cu.partition_id = v_pid AND cu.committed IS NULL;
    END LOOP;
END;
$function$;

CREATE OR REPLACE FUNCTION queenside.pop(p_group bigint, p_partition bigint, p_max_partitions integer, p_batch integer, p_lease_seconds integer, p_auto_ack boolean)
 RETURNS TABLE(partition_id bigint, partition_name text, lease_id uuid, lease_from bigint, lease_to bigint, lease_expires_at timestamp with time zone, head_attempts integer, seen_to bigint, first_offset bigint, committed_at timestamp with time zone, message_ids uuid[], transaction_ids text[], payloads bytea[], trace_ids text[], headers bytea[])
 LANGUAGE plpgsql
 SET enable_sort TO 'off'
 SET jit TO 'off'
AS $function$
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
    v_max       integer; -- the queue's max_deliveries
BEGIN
    SELECT g.start_at, make_interval(secs => q.delay_seconds),
           make_interval(secs => coalesce(p_lease_seconds, q.lease_seconds)), q.max_deliveries
      INTO v_start_at, v_delay, v_lease_len, v_max
      FROM queenside.groups g JOIN queenside.queues q ON q.id = g.queue_id
     WHERE g.id = p_group;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'queenside: group % does not exist', p_group USING ERRCODE = 'no_data_found';
    END IF;

    -- A subscription that started since: position its cursors now.
    IF v_start_at <= v_now AND EXISTS (SELECT 1 FROM queenside.cursors cu
                                        WHERE cu.group_id = p_group AND cu.committed IS NULL) THEN
        PERFORM queenside.position_cursors(p_group, v_start_at);
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
        -- With max_deliveries, a message at the cursor that as many leases
        -- delivered goes to the dead letters, and the cursor past it
        -- (shed_undelivered), before anything is delivered; then the
        -- cursor is read again.
        LOOP
            SELECT cu.partition_id AS pid, p.name AS pname, cu.delivered_to, cu.fail_offsets, cu.fail_counts,
                   cu.committed, cu.head_at, cu.committed AS cur, p.next_offset
              INTO c
              FROM queenside.cursors cu
              JOIN queenside.partitions p ON p.id = cu.partition_id
             WHERE cu.group_id = p_group AND cu.partition_id = v_pid;
            EXIT WHEN NOT FOUND; -- the queue was deleted meanwhile
            -- Start at the cursor, or at the first message still retained: past
            -- the end when retention deleted everything from the cursor on.
            v_cur := greatest(c.cur, coalesce((SELECT s.base_offset FROM queenside.segments s
                                                WHERE s.partition_id = c.pid AND s.last_offset >= c.cur
                                                ORDER BY s.last_offset LIMIT 1), c.next_offset));
            EXIT WHEN v_max = 0 OR cardinality(c.delivered_to) < v_max OR v_cur <> c.cur OR v_cur >= c.next_offset;
            PERFORM queenside.shed_undelivered(p_group, c.pid, v_cur, v_max);
        END LOOP;
        CONTINUE WHEN c.pid IS DISTINCT FROM v_pid;
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
        -- A message's last delivery is made alone (as in pop_many).
        IF v_max > 0 AND NOT p_auto_ack AND v_cur = c.cur AND cardinality(c.delivered_to) >= v_max - 1 THEN
            v_last := least(v_last, v_cur);
        END IF;
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
$function$;

CREATE OR REPLACE FUNCTION queenside.pop_many(p_group bigint, p_partition bigint, p_partitions integer[], p_batches integer[], p_lease_seconds integer, p_auto_ack boolean)
 RETURNS TABLE(request integer, serve_order integer, partition_id bigint, partition_name text, lease_id uuid, lease_from bigint, lease_to bigint, lease_expires_at timestamp with time zone, head_attempts integer, seen_to bigint, first_offset bigint, committed_at timestamp with time zone, message_ids uuid[], transaction_ids text[], payloads bytea[], trace_ids text[], headers bytea[])
 LANGUAGE plpgsql
 SET enable_sort TO 'off'
 SET enable_seqscan TO 'off'
 SET enable_bitmapscan TO 'off'
 SET jit TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
    v_start_at  timestamptz;
    v_delay     interval;
    v_lease_len interval;
    v_now       timestamptz := now();
    v_expires   timestamptz;
    v_want      integer := 0;
    v_max       integer; -- the queue's max_deliveries
    -- The partitions taken, in the order they are served: each one's
    -- cursor, last deliverable offset, last offset delivered before, and
    -- first message retained from the cursor on.
    c_pid   bigint[];
    c_name  text[];
    c_cur   bigint[];
    c_last  bigint[];
    c_seen  bigint[];
    c_first bigint[];
    c_att   integer[]; -- leases that delivered the message at the cursor
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
           make_interval(secs => coalesce(p_lease_seconds, q.lease_seconds)), q.max_deliveries
      INTO v_start_at, v_delay, v_lease_len, v_max
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
        PERFORM queenside.position_cursors(p_group, v_start_at);
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
               array_agg(t.last), array_agg(t.seen), array_agg(t.first), array_agg(t.att)
          INTO c_pid, c_name, c_cur, c_last, c_seen, c_first, c_att
          FROM (SELECT cu.partition_id, p.name, cu.committed,
                       CASE WHEN v_delay = interval '0' THEN p.next_offset - 1
                            ELSE (SELECT s.last_offset FROM queenside.segments s
                                   WHERE s.partition_id = cu.partition_id AND s.committed_at <= v_now - v_delay
                                   ORDER BY s.last_offset DESC LIMIT 1) END AS last,
                       coalesce((SELECT max(d) FROM unnest(cu.delivered_to) d), -1) AS seen,
                       cardinality(cu.delivered_to) AS att,
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
               array_agg(t.last), array_agg(t.seen), array_agg(t.first), array_agg(t.att)
          INTO c_pid, c_name, c_cur, c_last, c_seen, c_first, c_att
          FROM (SELECT cu.partition_id, p.name, cu.committed,
                       CASE WHEN v_delay = interval '0' THEN p.next_offset - 1
                            ELSE (SELECT s.last_offset FROM queenside.segments s
                                   WHERE s.partition_id = cu.partition_id AND s.committed_at <= v_now - v_delay
                                   ORDER BY s.last_offset DESC LIMIT 1) END AS last,
                       coalesce((SELECT max(d) FROM unnest(cu.delivered_to) d), -1) AS seen,
                       cardinality(cu.delivered_to) AS att,
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

    -- With max_deliveries, a message at the cursor that as many leases
    -- delivered goes to the dead letters, and the cursor past it
    -- (shed_undelivered), before anything is delivered. Where retention
    -- deleted the cursor's message the next pop looks (c_first > c_cur).
    IF v_max > 0 THEN
        FOR k IN 1 .. cardinality(c_pid) LOOP
            WHILE c_att[k] >= v_max AND c_first[k] <= c_cur[k] AND c_cur[k] <= c_last[k] LOOP
                c_att[k] := queenside.shed_undelivered(p_group, c_pid[k], c_cur[k], v_max);
                c_cur[k] := c_cur[k] + 1;
            END LOOP;
        END LOOP;
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
        -- A message's last delivery is made alone: if it kills its
        -- consumer, it alone is dead-lettered, and the messages leased
        -- with it before are delivered again, each counted apart.
        IF v_max > 0 AND NOT p_auto_ack AND c_att[k] >= v_max - 1 THEN
            a_hi[k] := least(a_hi[k], c_cur[k]);
        END IF;
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
$function$;
