-- queenside storage, version 17: pop works out its cursor's head by
-- assignments (SCALING.md, section 4).
--
-- pop's three UPDATEs of the cursor it serves called cursor_head, a
-- volatile function that reads segments, inside them (R3, R6): on Citus a
-- pop of a named partition failed there. The head is an assignment before
-- each UPDATE now, in the same transaction, after the same lock of the
-- cursor. The signature stays.

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
