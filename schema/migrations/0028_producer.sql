-- queenside storage, version 28: who produced each message.
--
-- Every stored message records the role that pushed it: segments.producer
-- is the session_user of the push, stamped by PostgreSQL from the
-- column's default (the push functions do not name the column, and no
-- role but the owner may write the table), never taken from the client.
-- A consumer can trust it. Segments written before this version have
-- none (NULL). A dead letter keeps its message's producer, and a replay
-- of it is stamped with the role that replays it, which pushes it again.
--
-- pop and pop_from return it as one more column, last: a sidecar of the
-- release before selects its columns by name and gets what it got. Their
-- result changes, so each is dropped and made again, with what version
-- 25 gave them (SECURITY DEFINER, the consume check). pop_many keeps its
-- result. dlq_list and message_page (the dead letters' list, the
-- dashboard's browser) return it too.

ALTER TABLE queenside.segments ADD COLUMN producer text;
ALTER TABLE queenside.segments ALTER COLUMN producer SET DEFAULT session_user;
ALTER TABLE queenside.dead_letters ADD COLUMN producer text;

-- A dead letter keeps its producer.
CREATE OR REPLACE FUNCTION queenside.ack(p_group bigint, p_partition bigint, p_lease uuid, p_offsets bigint[], p_hashes uuid[], p_failed boolean[], p_errors text[], p_wake boolean)
 RETURNS TABLE(idx integer, success boolean, code text, dead_lettered boolean, released boolean, cursor_offset bigint)
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
AS $function$
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
    v_head    timestamptz;
    i         integer;
BEGIN
    SELECT * INTO c FROM queenside.cursors cu
     WHERE cu.group_id = p_group AND cu.partition_id = p_partition FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT g.i, false, 'lease_expired', false, false, NULL::bigint FROM generate_series(1, n) g (i);
        RETURN;
    END IF;
    SELECT q.name, q.retry_limit,
           make_interval(secs => greatest(q.dedup_window_seconds, q.completed_retention_seconds, 900))
      INTO v_queue, v_retry, v_keep
      FROM queenside.partitions p JOIN queenside.queues q ON q.id = p.queue_id
     WHERE p.id = p_partition;

    -- Items named by transaction id: resolve them through the hashes still
    -- kept, the newest message of each; one not found is unresolvable (and
    -- its message comes again).
    IF p_hashes IS NOT NULL THEN
        FOR i IN 1 .. n LOOP
            CONTINUE WHEN v_off[i] IS NOT NULL;
            v_found := NULL;
            SELECT max(k.msg_offset) INTO v_found
              FROM (SELECT d.msg_offset FROM queenside.dedup d
                     WHERE uuid_hash_extended(d.hash, d.partition_id) = uuid_hash_extended(p_hashes[i], p_partition) AND
                           d.partition_id = p_partition AND d.hash = p_hashes[i] AND d.committed_at > now() - v_keep
                    UNION ALL
                    SELECT s.last_offset FROM queenside.segments s
                     WHERE s.partition_id = p_partition AND s.hash = p_hashes[i] AND s.committed_at > now() - v_keep) k;
            v_off[i] := v_found;
        END LOOP;
    END IF;

    -- A lease no longer live records nothing. An item whose message the
    -- group's cursor has already passed was settled before (acked by this
    -- lease or a later one, or dead-lettered): it answers already_acked,
    -- so that an ack sent twice is not taken for one that came too late.
    -- The others answer lease_expired: their messages come again.
    IF c.lease_id IS DISTINCT FROM p_lease OR c.lease_expires_at <= now() THEN
        RETURN QUERY SELECT u.i::integer, false,
                            CASE WHEN u.o < c.committed THEN 'already_acked' ELSE 'lease_expired' END,
                            false, false, c.committed
                       FROM unnest(v_off) WITH ORDINALITY AS u (o, i);
        RETURN;
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
                                                error, failures, committed_at, producer)
            SELECT q.id, p.id, g.id, q.name, p.name, g.name, v_fail,
                   s.message_ids[v_fail - s.base_offset + 1], s.transaction_ids[v_fail - s.base_offset + 1],
                   s.payloads[v_fail - s.base_offset + 1], s.trace_ids[v_fail - s.base_offset + 1],
                   s.headers[v_fail - s.base_offset + 1],
                   (SELECT p_errors[j] FROM generate_series(1, n) j
                     WHERE p_failed[j] AND v_code[j] IS NULL AND v_off[j] = v_fail LIMIT 1),
                   v_count, s.committed_at, s.producer
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

    v_head := CASE WHEN v_cursor = c.committed THEN c.head_at
                   ELSE queenside.cursor_head(p_partition, v_cursor) END;
    UPDATE queenside.cursors cu
       SET committed = v_cursor,
           head_at = v_head,
           lease_id = CASE WHEN v_release THEN NULL ELSE c.lease_id END,
           lease_done = CASE WHEN v_release THEN NULL
                             ELSE ARRAY(SELECT DISTINCT x FROM unnest(v_done) x WHERE x > v_cursor ORDER BY x) END,
           delivered_to = ARRAY(SELECT x FROM unnest(c.delivered_to) x WHERE x >= v_cursor ORDER BY x),
           fail_offsets = ARRAY(SELECT o FROM unnest(v_fo, v_fc) f (o, k) WHERE o >= v_cursor ORDER BY o),
           fail_counts = ARRAY(SELECT k FROM unnest(v_fo, v_fc) f (o, k) WHERE o >= v_cursor ORDER BY o)
     WHERE cu.group_id = p_group AND cu.partition_id = p_partition;

    -- A rewind makes messages deliverable again at once: wake waiting pops
    -- (on a worker, where no sidecar listens, the caller does).
    IF v_fail IS NOT NULL AND p_wake THEN
        PERFORM queenside.wake(v_queue);
    END IF;

    RETURN QUERY
    SELECT g.i, v_code[g.i] IS NULL, v_code[g.i], v_dead[g.i], v_release, v_cursor
      FROM generate_series(1, n) g (i);
END;
$function$;

CREATE OR REPLACE FUNCTION queenside.shed_undelivered(p_group bigint, p_partition bigint, p_offset bigint, p_max integer)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_left integer;
    v_head timestamptz;
BEGIN
    INSERT INTO queenside.dead_letters (queue_id, partition_id, group_id, queue_name, partition_name, group_name,
                                        msg_offset, message_id, transaction_id, payload, trace_id, headers,
                                        error, failures, committed_at, producer)
    SELECT q.id, p.id, g.id, q.name, p.name, g.name, p_offset,
           s.message_ids[p_offset - s.base_offset + 1], s.transaction_ids[p_offset - s.base_offset + 1],
           s.payloads[p_offset - s.base_offset + 1], s.trace_ids[p_offset - s.base_offset + 1],
           s.headers[p_offset - s.base_offset + 1],
           format('delivered %s times under a lease without being acked (maxDeliveries %s)',
                  cardinality(cu.delivered_to), p_max),
           coalesce(cu.fail_counts[array_position(cu.fail_offsets, p_offset)], 0), s.committed_at, s.producer
      FROM queenside.cursors cu
      JOIN queenside.partitions p ON p.id = cu.partition_id
      JOIN queenside.queues q ON q.id = p.queue_id
      JOIN queenside.groups g ON g.id = cu.group_id
     CROSS JOIN LATERAL (SELECT * FROM queenside.segments s
                          WHERE s.partition_id = p_partition AND s.last_offset >= p_offset
                          ORDER BY s.last_offset LIMIT 1) s
     WHERE cu.group_id = p_group AND cu.partition_id = p_partition AND s.base_offset <= p_offset;

    v_head := queenside.cursor_head(p_partition, p_offset + 1);
    UPDATE queenside.cursors cu
       SET committed = p_offset + 1,
           head_at = v_head,
           lease_id = NULL, lease_done = NULL,
           delivered_to = ARRAY(SELECT x FROM unnest(cu.delivered_to) x WHERE x > p_offset ORDER BY x),
           fail_offsets = ARRAY(SELECT o FROM unnest(cu.fail_offsets) o WHERE o > p_offset ORDER BY o),
           fail_counts = ARRAY(SELECT fc.n FROM unnest(cu.fail_offsets, cu.fail_counts) fc (o, n)
                                WHERE fc.o > p_offset ORDER BY fc.o)
     WHERE cu.group_id = p_group AND cu.partition_id = p_partition
    RETURNING cardinality(cu.delivered_to) INTO v_left;
    RETURN v_left;
END;
$function$;

-- pop and pop_from return the producer.
DROP FUNCTION queenside.pop(bigint, bigint, integer, integer, integer, boolean);
CREATE FUNCTION queenside.pop(p_group bigint, p_partition bigint, p_max_partitions integer, p_batch integer, p_lease_seconds integer, p_auto_ack boolean)
 RETURNS TABLE(partition_id bigint, partition_name text, lease_id uuid, lease_from bigint, lease_to bigint, lease_expires_at timestamp with time zone, head_attempts integer, seen_to bigint, first_offset bigint, committed_at timestamp with time zone, message_ids uuid[], transaction_ids text[], payloads bytea[], trace_ids text[], headers bytea[], producer text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
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
    v_head      timestamptz;
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

    -- A subscription that started since: position its cursors now. A
    -- partition named is looked at alone (on Citus, its shard's).
    IF v_start_at IS NOT NULL AND v_start_at <= v_now AND p_partition IS NULL AND EXISTS (
           SELECT 1 FROM queenside.cursors cu WHERE cu.group_id = p_group AND cu.committed IS NULL) THEN
        PERFORM queenside.position_cursors(p_group, v_start_at);
    ELSIF v_start_at IS NOT NULL AND v_start_at <= v_now AND EXISTS (
           SELECT 1 FROM queenside.cursors cu
            WHERE cu.group_id = p_group AND cu.partition_id = p_partition AND cu.committed IS NULL) THEN
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
                v_head := queenside.cursor_head(c.pid, v_cur);
                UPDATE queenside.cursors cu
                   SET committed = v_cur, head_at = v_head,
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
            v_head := queenside.cursor_head(c.pid, v_last + 1);
            UPDATE queenside.cursors cu
               SET committed = v_last + 1, head_at = v_head,
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
            v_head := CASE WHEN v_cur = c.committed THEN c.head_at ELSE queenside.cursor_head(c.pid, v_cur) END;
            UPDATE queenside.cursors cu
               SET committed = v_cur,
                   head_at = v_head,
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
               CASE WHEN r.whole THEN s.headers ELSE s.headers[r.i:r.j] END,
               s.producer
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

DROP FUNCTION queenside.pop_from(bigint, bigint, bigint[], integer[], integer[], integer, boolean);
CREATE FUNCTION queenside.pop_from(p_route bigint, p_group bigint, p_pids bigint[], p_partitions integer[], p_batches integer[], p_lease_seconds integer, p_auto_ack boolean)
 RETURNS TABLE(request integer, serve_order integer, partition_id bigint, partition_name text, lease_id uuid, lease_from bigint, lease_to bigint, lease_expires_at timestamp with time zone, head_attempts integer, seen_to bigint, first_offset bigint, committed_at timestamp with time zone, message_ids uuid[], transaction_ids text[], payloads bytea[], trace_ids text[], headers bytea[], producer text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET enable_sort TO 'off'
 SET enable_seqscan TO 'off'
 SET enable_bitmapscan TO 'off'
 SET jit TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
 SET search_path TO 'pg_catalog', 'pg_temp'
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
           CASE WHEN r.whole THEN s.headers ELSE s.headers[r.i:r.j] END,
               s.producer
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
               CASE WHEN r.whole THEN s.headers ELSE s.headers[r.i:r.j] END,
               s.producer
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

-- pop_many, the form of the releases before pop_from, keeps its result.
CREATE OR REPLACE FUNCTION queenside.pop_many(p_group bigint, p_partition bigint, p_partitions integer[], p_batches integer[], p_lease_seconds integer, p_auto_ack boolean)
 RETURNS TABLE(request integer, serve_order integer, partition_id bigint, partition_name text, lease_id uuid, lease_from bigint, lease_to bigint, lease_expires_at timestamp with time zone, head_attempts integer, seen_to bigint, first_offset bigint, committed_at timestamp with time zone, message_ids uuid[], transaction_ids text[], payloads bytea[], trace_ids text[], headers bytea[])
 LANGUAGE plpgsql
AS $function$
BEGIN
    RETURN QUERY
    SELECT f.request, f.serve_order, f.partition_id, f.partition_name, f.lease_id, f.lease_from, f.lease_to,
           f.lease_expires_at, f.head_attempts, f.seen_to, f.first_offset, f.committed_at, f.message_ids,
           f.transaction_ids, f.payloads, f.trace_ids, f.headers
      FROM queenside.pop_from(NULL::bigint, p_group, CASE WHEN p_partition IS NOT NULL THEN ARRAY[p_partition] END,
                              p_partitions, p_batches, p_lease_seconds, p_auto_ack) f;
END;
$function$;

-- The dead letters' list and the browser show it.
DROP FUNCTION queenside.dlq_list(text, text, text, text, timestamptz, timestamptz, bigint, integer);
CREATE FUNCTION queenside.dlq_list(p_queue text, p_group text, p_partition text, p_error_contains text, p_dead_from timestamp with time zone, p_dead_to timestamp with time zone, p_after_id bigint, p_limit integer)
 RETURNS TABLE(o_id bigint, o_queue text, o_partition text, o_group text, o_offset bigint, o_message_id uuid, o_transaction_id text, o_payload bytea, o_error text, o_failures integer, o_committed_at timestamp with time zone, o_dead_at timestamp with time zone, o_replayed_at timestamp with time zone, o_replay_message_id uuid, o_replay_transaction_id text, o_replay_offset bigint, o_producer text)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
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
               d.replay_message_id, d.replay_transaction_id, d.replay_offset, d.producer
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
           d.replay_message_id, d.replay_transaction_id, d.replay_offset, d.producer
      FROM queenside.dead_letters d
     WHERE d.queue_id = ANY (v_readable)
       AND (p_group IS NULL OR d.group_name = p_group) AND (p_partition IS NULL OR d.partition_name = p_partition)
       AND (p_error_contains = '' OR strpos(coalesce(d.error, ''), p_error_contains) > 0)
       AND (p_dead_from IS NULL OR d.dead_at >= p_dead_from) AND (p_dead_to IS NULL OR d.dead_at < p_dead_to)
       AND d.id > p_after_id
     ORDER BY d.id LIMIT p_limit;
END;
$function$;

DROP FUNCTION queenside.message_page(bigint, bigint, integer, integer);
CREATE FUNCTION queenside.message_page(p_partition bigint, p_from bigint, p_limit integer, p_max_payload integer)
 RETURNS TABLE(o_offset bigint, o_committed_at timestamp with time zone, o_message_id uuid, o_transaction_id text, o_trace_id text, o_headers bytea, o_payload_bytes integer, o_payload bytea, o_producer text)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    PERFORM queenside.reading(p_partition);
    RETURN QUERY
    SELECT greatest(p_from, s.base_offset) + u.i - 1, s.committed_at, u.mid, u.txid, u.trace, u.hdr,
           octet_length(u.payload), CASE WHEN octet_length(u.payload) <= p_max_payload THEN u.payload END, s.producer
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
