-- queenside storage, version 22: consume checked by PostgreSQL.
--
-- A role that is not the schema's owner pops, acks, renews and releases
-- leases, and joins or makes a group, only on the queues it may consume
-- (and, where its grant names groups, only as those groups). consuming()
-- decides it for a group by id; join_group, by name, before the group may
-- exist. pop_from, ack_call, join_group and the SQL API's ack_message, as
-- the versions before left them, now check first; renew and release call
-- consuming() in their statements. A check reads the group's and the
-- queue's rows and the role's grants, each by its key; the owner's calls
-- skip it.

-- consuming tells that the session's role may consume as group p_group,
-- and raises the refusal (refuse_unless) when it may not.
CREATE FUNCTION queenside.consuming(p_group bigint) RETURNS boolean
 LANGUAGE plpgsql STABLE
AS $function$
BEGIN
    IF NOT queenside.is_owner() THEN
        PERFORM queenside.refuse_unless(q.name, 'consume', g.name)
           FROM queenside.groups g JOIN queenside.queues q ON q.id = g.queue_id
          WHERE g.id = p_group;
    END IF;
    RETURN true;
END;
$function$;

CREATE OR REPLACE FUNCTION queenside.join_group(p_queue text, p_group text, p_mode text, p_from timestamp with time zone, OUT o_group bigint, OUT o_queue bigint)
 RETURNS record
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_mode  text;
    v_start timestamptz;
    v_pids  bigint[] := '{}';
    v_curs  bigint[] := '{}';
    v_heads timestamptz[] := '{}';
    v_cur   bigint;
    v_pid   bigint;
BEGIN
    -- Joining a group, or making it, is consuming as it (version 22).
    IF NOT queenside.is_owner() THEN
        PERFORM queenside.refuse_unless(p_queue, 'consume', p_group);
    END IF;
    SELECT g.id, g.queue_id INTO o_group, o_queue
      FROM queenside.groups g
      JOIN queenside.queues q ON q.id = g.queue_id
     WHERE q.name = p_queue AND g.name = p_group;
    IF FOUND THEN
        RETURN;
    END IF;
    SELECT q.id INTO o_queue FROM queenside.queues q WHERE q.name = p_queue FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO queenside.early_groups (queue_name, group_name, subscription_mode, start_at)
        VALUES (p_queue, p_group, p_mode, CASE p_mode WHEN 'new' THEN clock_timestamp() WHEN 'from' THEN p_from END)
        ON CONFLICT (queue_name, group_name) DO NOTHING;
        RETURN;
    END IF;
    -- The queue row's lock, held from here, makes one creator of the group.
    DELETE FROM queenside.early_groups e WHERE e.queue_name = p_queue AND e.group_name = p_group
    RETURNING e.subscription_mode, e.start_at INTO v_mode, v_start;
    IF NOT FOUND THEN
        v_mode := p_mode;
        v_start := CASE p_mode WHEN 'new' THEN clock_timestamp() WHEN 'from' THEN p_from END;
    END IF;
    INSERT INTO queenside.groups (queue_id, name, subscription_mode, start_at)
    VALUES (o_queue, p_group, v_mode, v_start)
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

CREATE OR REPLACE FUNCTION queenside.pop_from(p_route bigint, p_group bigint, p_pids bigint[], p_partitions integer[], p_batches integer[], p_lease_seconds integer, p_auto_ack boolean)
 RETURNS TABLE(request integer, serve_order integer, partition_id bigint, partition_name text, lease_id uuid, lease_from bigint, lease_to bigint, lease_expires_at timestamp with time zone, head_attempts integer, seen_to bigint, first_offset bigint, committed_at timestamp with time zone, message_ids uuid[], transaction_ids text[], payloads bytea[], trace_ids text[], headers bytea[])
 LANGUAGE plpgsql
 SET enable_sort TO 'off'
 SET enable_seqscan TO 'off'
 SET enable_bitmapscan TO 'off'
 SET jit TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
    -- p_route: on Citus, a partition of the shard of p_pids (all on one),
    -- by which the call is sent whole to that shard's worker
    -- (schema.Distribute); NULL on one PostgreSQL.
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
    a_head  timestamptz[]; -- with auto-ack, each cursor's head past its span
    -- Where retention deleted a cursor's message: where its span starts
    -- (the first message retained from the cursor on), and its new head.
    d_lo    bigint[];
    d_head  timestamptz[];
    d_keep  boolean[]; -- the head stays (a lease from the cursor itself)
    v_lo    bigint;
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
    PERFORM queenside.consuming(p_group);
    v_expires := v_now + v_lease_len;
    FOR k IN 1 .. cardinality(p_partitions) LOOP
        v_want := v_want + p_partitions[k];
    END LOOP;

    -- A subscription that started since: position its cursors now. The
    -- partitions named are looked at alone (on Citus, one shard's); a group
    -- without a start time had every cursor positioned when it was made.
    IF v_start_at IS NOT NULL AND v_start_at <= v_now AND p_pids IS NULL AND EXISTS (
           SELECT 1 FROM queenside.cursors cu WHERE cu.group_id = p_group AND cu.committed IS NULL) THEN
        PERFORM queenside.position_cursors(p_group, v_start_at);
    ELSIF v_start_at IS NOT NULL AND v_start_at <= v_now AND EXISTS (
           SELECT 1 FROM queenside.cursors cu
            WHERE cu.group_id = p_group AND cu.partition_id = ANY (p_pids) AND cu.committed IS NULL) THEN
        PERFORM queenside.position_cursors(p_group, v_start_at);
    END IF;

    -- The partitions to serve, locked: ready ones (a message waiting, no
    -- live lease of the group), the one whose next message has waited
    -- longest first. SKIP LOCKED and the recheck of the conditions under
    -- the lock are what keep two pops from ever leasing one partition.
    -- Without a delay everything up to a partition's end is deliverable;
    -- with one, up to its last segment committed long enough ago (commit
    -- times grow with offsets). p_pids NULL chooses among every partition
    -- of the group, which one PostgreSQL does in one locking scan; on Citus
    -- no lock may span shards (SCALING.md, section 4, R2), and the sidecar
    -- names the partitions to choose among, the candidates of one shard (a
    -- named partition, or what an unlocked look found ready). Two
    -- statements that differ in their WHERE only: one for both cases would
    -- not look partitions up by key once its plan is generic.
    IF p_pids IS NULL THEN
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
                                   WHERE s.partition_id = cu.partition_id AND s.partition_id = ANY (p_pids)
                                     AND s.committed_at <= v_now - v_delay
                                   ORDER BY s.last_offset DESC LIMIT 1) END AS last,
                       coalesce((SELECT max(d) FROM unnest(cu.delivered_to) d), -1) AS seen,
                       cardinality(cu.delivered_to) AS att,
                       (SELECT s.base_offset FROM queenside.segments s
                         WHERE s.partition_id = cu.partition_id AND s.partition_id = ANY (p_pids)
                           AND s.last_offset >= cu.committed
                         ORDER BY s.last_offset LIMIT 1) AS first
                  FROM queenside.cursors cu
                  JOIN queenside.partitions p ON p.id = cu.partition_id
                 WHERE cu.group_id = p_group AND cu.partition_id = ANY (p_pids) AND p.id = ANY (p_pids)
                   AND cu.head_at IS NOT NULL AND cu.head_at <= v_now - v_delay
                   AND (cu.lease_id IS NULL OR cu.lease_expires_at <= v_now)
                   AND p.next_offset > cu.committed
                 ORDER BY cu.head_at, cu.partition_id
                 LIMIT v_want
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

    -- With auto-ack, the head each cursor will have past its span, worked
    -- out before the statement that moves it: cursor_head reads segments,
    -- which a statement on a distributed table may not call (R3, R6). Its
    -- share lock on a partition at its end is held to the commit, so a
    -- push there still finds the cursor waiting and gives it its head.
    IF p_auto_ack THEN
        a_head := array_fill(NULL::timestamptz, ARRAY[cardinality(c_pid)]);
        FOR k IN 1 .. cardinality(c_pid) LOOP
            IF a_req[k] <> 0 AND c_first[k] <= c_cur[k] THEN
                a_head[k] := queenside.cursor_head(c_pid[k], a_hi[k] + 1);
            END IF;
        END LOOP;
    END IF;

    -- Where the message at the cursor is retained, the usual case, one
    -- statement reads each span and leases it (or, with auto-ack, moves the
    -- cursor past it), in one snapshot: what is leased is what is read.
    -- Retention deletes a prefix of a partition, so a cursor whose message
    -- is still there has its whole span there; one whose message went
    -- since the partitions were taken is left for the next pop.
    -- Each relation's restriction by the call's partitions is for Citus's
    -- pruning alone: on one PostgreSQL the look-ups go by each partition's
    -- key (see version 19).
    RETURN QUERY
    WITH a AS (
        SELECT x.*
          FROM unnest(a_req, c_pid, c_name, c_cur, a_hi, c_last, c_seen, a_lease, c_first, a_head)
               WITH ORDINALITY AS x (req, pid, pname, cur, hi, last, seen, lease, first, head, ord)
         WHERE x.req <> 0 AND x.first <= x.cur
    ), moved AS (
        UPDATE queenside.cursors cu
           SET committed = CASE WHEN p_auto_ack THEN a.hi + 1 ELSE cu.committed END,
               head_at = CASE WHEN p_auto_ack THEN a.head ELSE cu.head_at END,
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
         WHERE cu.partition_id = a.pid AND cu.group_id = p_group AND (NOT queenside.distributed() OR cu.partition_id = ANY (c_pid))
           AND (SELECT s.base_offset FROM queenside.segments s
                 WHERE s.partition_id = a.pid AND (NOT queenside.distributed() OR s.partition_id = ANY (c_pid)) AND s.last_offset >= a.cur
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
                              WHERE e.partition_id = a.pid AND (NOT queenside.distributed() OR e.partition_id = ANY (c_pid)) AND e.last_offset >= a.hi
                              ORDER BY e.last_offset LIMIT 1) END AS stop) e
     CROSS JOIN LATERAL (SELECT s.* FROM queenside.segments s
                          WHERE s.partition_id = a.pid AND (NOT queenside.distributed() OR s.partition_id = ANY (c_pid))
                            AND s.last_offset >= a.cur AND s.last_offset <= e.stop
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
        -- Where each such span starts, at the first message retained from
        -- its cursor on (past the end when there is none), and the head the
        -- cursor will have, worked out one partition at a time (R3, R6).
        d_lo := array_fill(NULL::bigint, ARRAY[cardinality(c_pid)]);
        d_head := array_fill(NULL::timestamptz, ARRAY[cardinality(c_pid)]);
        d_keep := array_fill(false, ARRAY[cardinality(c_pid)]);
        FOR k IN 1 .. cardinality(c_pid) LOOP
            CONTINUE WHEN c_first[k] IS NOT NULL AND c_first[k] <= c_cur[k];
            -- Into a plain variable: Citus cannot run a query on its
            -- tables assigned to an array element.
            v_lo := greatest(c_cur[k], coalesce(
                (SELECT s.base_offset FROM queenside.segments s
                  WHERE s.partition_id = c_pid[k] AND s.last_offset >= c_cur[k]
                  ORDER BY s.last_offset LIMIT 1),
                (SELECT n.next_offset FROM queenside.partitions n WHERE n.id = c_pid[k])));
            d_lo[k] := v_lo;
            IF a_req[k] <> 0 AND d_lo[k] <= a_hi[k] AND NOT p_auto_ack AND d_lo[k] = c_cur[k] THEN
                d_keep[k] := true;
            ELSIF a_req[k] <> 0 AND d_lo[k] <= a_hi[k] AND p_auto_ack THEN
                d_head[k] := queenside.cursor_head(c_pid[k], a_hi[k] + 1);
            ELSE
                d_head[k] := queenside.cursor_head(c_pid[k], d_lo[k]);
            END IF;
        END LOOP;
        RETURN QUERY
        WITH a AS (
            SELECT x.*
              FROM unnest(a_req, c_pid, c_name, c_cur, a_hi, c_last, c_seen, a_lease, d_lo, d_head, d_keep)
                   WITH ORDINALITY AS x (req, pid, pname, cur, hi, last, seen, lease, lo, head, keep, ord)
             WHERE x.lo IS NOT NULL
        ), moved AS (
            UPDATE queenside.cursors cu
               SET committed = CASE WHEN a.req = 0 OR a.lo > a.hi THEN a.lo WHEN p_auto_ack THEN a.hi + 1 ELSE a.lo END,
                   head_at = CASE WHEN a.keep THEN cu.head_at ELSE a.head END,
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
             WHERE cu.partition_id = a.pid AND cu.group_id = p_group AND (NOT queenside.distributed() OR cu.partition_id = ANY (c_pid))
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
                                  WHERE e.partition_id = a.pid AND (NOT queenside.distributed() OR e.partition_id = ANY (c_pid))
                                    AND e.last_offset >= a.hi
                                  ORDER BY e.last_offset LIMIT 1) END AS stop) e
         CROSS JOIN LATERAL (SELECT s.* FROM queenside.segments s
                              WHERE s.partition_id = a.pid AND (NOT queenside.distributed() OR s.partition_id = ANY (c_pid))
                                AND s.last_offset >= a.lo AND s.last_offset <= e.stop
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

CREATE OR REPLACE FUNCTION queenside.ack_call(p_route bigint, p_groups bigint[], p_partitions bigint[], p_leases uuid[], p_slots integer[], p_offsets bigint[], p_hashes uuid[], p_failed boolean[], p_errors text[])
 RETURNS TABLE(idx integer, success boolean, code text, dead_lettered boolean, released boolean, cursor_offset bigint)
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET enable_hashjoin TO 'off'
 SET enable_mergejoin TO 'off'
 SET jit TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
    -- p_route: on Citus, a partition of the call's shard (every lease of
    -- the call is on it), by which the call is sent whole to that shard's
    -- worker (schema.Distribute); NULL on one PostgreSQL.
    v_fast  integer[]; -- slots applied by the set-based update
    v_cur   bigint[];  -- and the cursor each now stands at
    v_items integer[];
    v_now   timestamptz := now();
    k       integer;
BEGIN
    PERFORM queenside.consuming(g) FROM (SELECT DISTINCT unnest(p_groups)) AS x (g);
    -- Some item fails a message, or names it by transaction id: every
    -- cursor of the call is locked first, in (partition, group) order, so
    -- two calls can never deadlock (ack locks its row again: a no-op).
    IF p_hashes IS NOT NULL OR true = ANY (p_failed) OR array_position(p_offsets, NULL) IS NOT NULL THEN
        PERFORM 1 FROM queenside.cursors cu
          JOIN unnest(p_groups, p_partitions) AS l (g, p) ON cu.group_id = l.g AND cu.partition_id = l.p
         WHERE cu.partition_id = ANY (p_partitions)
         ORDER BY cu.partition_id, cu.group_id
           FOR UPDATE OF cu;
    END IF;

    -- The common case. Completed offsets forming a gapless run lo..hi, with
    -- lo between the lease's start and the cursor and hi its last offset,
    -- move the cursor to hi + 1 exactly as ack would: the run covers the
    -- cursor's own message (so no message deleted by retention is in the
    -- way), and every completion remembered past a gap lies inside it. The
    -- runs come in key order, and the update takes them in that order.
    -- The restrictions by p_partitions are for Citus's pruning alone (see
    -- version 19).
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
                                     WHERE s.partition_id = r.p AND (NOT queenside.distributed() OR s.partition_id = ANY (p_partitions))
                                       AND s.last_offset >= r.hi + 1
                                     ORDER BY s.last_offset LIMIT 1)
                              WHEN lk.id IS NULL THEN v_now
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
                              WHERE l.id = r.p AND (NOT queenside.distributed() OR l.id = ANY (p_partitions)) AND r.hi + 1 >= p.next_offset
                                FOR SHARE SKIP LOCKED) lk ON true
         WHERE cu.partition_id = r.p AND cu.group_id = r.g
           AND (NOT queenside.distributed() OR (cu.partition_id = ANY (p_partitions) AND p.id = ANY (p_partitions)))
           AND cu.lease_id = r.lease AND cu.lease_expires_at > v_now
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
                             ARRAY(SELECT p_errors[i] FROM unnest(v_items) WITH ORDINALITY AS x (i, o) ORDER BY x.o),
                             p_route IS NULL) a;
    END LOOP;
END;
$function$;

CREATE OR REPLACE FUNCTION queenside.ack_message(p_lease_id text, p_offset bigint, p_status text DEFAULT 'completed'::text, p_error text DEFAULT NULL::text, p_transaction_id text DEFAULT NULL::text, OUT success boolean, OUT code text, OUT dead_lettered boolean)
 RETURNS record
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_parts text[] := string_to_array(p_lease_id, '.');
    r       record;
BEGIN
    IF p_status IS NULL OR p_status NOT IN ('completed', 'failed') THEN
        PERFORM queenside.refuse('invalid_argument', format('status %L must be completed or failed', p_status));
    END IF;
    IF (p_offset IS NULL) = (p_transaction_id IS NULL) THEN
        PERFORM queenside.refuse('invalid_argument', 'give the offset or the transaction id, not both');
    END IF;
    IF octet_length(p_error) > 4096 THEN
        PERFORM queenside.refuse('invalid_argument', 'error must be at most 4096 bytes');
    END IF;
    -- A lease id is group.partition.uuid (store/leaseid.go); one that is
    -- not names no live lease.
    IF cardinality(v_parts) IS DISTINCT FROM 3 OR v_parts[1] !~ '^[0-9]{1,18}$' OR v_parts[2] !~ '^[0-9]{1,18}$'
       OR v_parts[3] !~ '^[0-9a-f]{32}$' THEN
        success := false;
        code := 'lease_expired';
        dead_lettered := false;
        RETURN;
    END IF;
    PERFORM queenside.consuming(v_parts[1]::bigint);
    SELECT * INTO r FROM queenside.ack(v_parts[1]::bigint, v_parts[2]::bigint, v_parts[3]::uuid, ARRAY[p_offset],
                                       CASE WHEN p_offset IS NULL THEN ARRAY[queenside.transaction_hash(p_transaction_id)] END,
                                       ARRAY[p_status = 'failed'], ARRAY[p_error], true);
    success := r.success;
    code := r.code;
    dead_lettered := r.dead_lettered;
END;
$function$;
