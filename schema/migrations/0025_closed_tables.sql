-- queenside storage, version 25: the tables closed to application roles.
--
-- A role that is not the schema's owner has no privilege on queenside's
-- tables: it reaches them only through the functions below and those of
-- the versions after, each of which checks the role's grant for the queue
-- and the right before it touches anything. They are SECURITY DEFINER:
-- they run with the owner's privileges, while session_user, which the
-- checks ask, stays the caller's role. Each sets search_path to
-- pg_catalog, so that a caller's search_path cannot put a function or an
-- operator of its own in place of one the body calls.
--
-- The functions an application calls that only call others (push's and
-- ack_call's forms without a route, pop_many, send, send_json*) are left
-- as they are: the function they call checks. So are the functions only
-- these call (ack, seek, first_offset_at, position_cursors, ...): a role
-- calling one of them directly is refused by PostgreSQL, for want of a
-- privilege on the tables it reads.
--
-- pop, the form a sidecar calls for one partition, did not check consume;
-- it now does, as pop_from does. ready_partitions (Citus' choice of
-- partitions) checks it too.

-- The entry points that check already.
ALTER FUNCTION queenside.push(bigint, bigint[], integer[], integer[], integer[], uuid[], integer[], uuid[], text[], bytea[], text[], bytea[]) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION queenside.pop_from(bigint, bigint, bigint[], integer[], integer[], integer, boolean) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION queenside.ack_call(bigint, bigint[], bigint[], uuid[], integer[], bigint[], uuid[], boolean[], text[]) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION queenside.ack_message(text, bigint, text, text, text) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION queenside.join_group(text, text, text, timestamptz) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION queenside.ensure_group(text, text, text, timestamptz) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION queenside.ensure_partitions(text, text[]) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION queenside.send_batch(text, bytea[], text[], text[], jsonb[], text[]) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
-- Retention applies what each queue's configuration says, whichever
-- sidecar runs it: a duty, not a right, so it checks nothing.
ALTER FUNCTION queenside.expire_segments(bigint, integer, integer) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION queenside.purge_dedup(bigint, integer, integer) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION queenside.purge_orphan_hashes(integer, integer) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

-- pop checks consume.
CREATE OR REPLACE FUNCTION queenside.pop(p_group bigint, p_partition bigint, p_max_partitions integer, p_batch integer, p_lease_seconds integer, p_auto_ack boolean)
 RETURNS TABLE(partition_id bigint, partition_name text, lease_id uuid, lease_from bigint, lease_to bigint, lease_expires_at timestamp with time zone, head_attempts integer, seen_to bigint, first_offset bigint, committed_at timestamp with time zone, message_ids uuid[], transaction_ids text[], payloads bytea[], trace_ids text[], headers bytea[])
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

-- ready_partitions checks consume.
CREATE OR REPLACE FUNCTION queenside.ready_partitions(p_group bigint, p_limit integer)
 RETURNS TABLE(partition_id bigint)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_start_at timestamptz;
    v_delay    interval;
    v_now      timestamptz := now();
BEGIN
    SELECT g.start_at, make_interval(secs => q.delay_seconds) INTO v_start_at, v_delay
      FROM queenside.groups g JOIN queenside.queues q ON q.id = g.queue_id
     WHERE g.id = p_group;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'queenside: group % does not exist', p_group USING ERRCODE = 'no_data_found';
    END IF;
    PERFORM queenside.consuming(p_group);
    IF v_start_at IS NOT NULL AND v_start_at <= v_now AND EXISTS (SELECT 1 FROM queenside.cursors cu
                                        WHERE cu.group_id = p_group AND cu.committed IS NULL) THEN
        PERFORM queenside.position_cursors(p_group, v_start_at);
    END IF;
    RETURN QUERY
    SELECT cu.partition_id
      FROM queenside.cursors cu
      JOIN queenside.partitions p ON p.id = cu.partition_id
     WHERE cu.group_id = p_group
       AND cu.head_at IS NOT NULL AND cu.head_at <= v_now - v_delay
       AND (cu.lease_id IS NULL OR cu.lease_expires_at <= v_now)
       AND p.next_offset > cu.committed
     ORDER BY cu.head_at, cu.partition_id
     LIMIT p_limit;
END;
$function$;

-- touches tells whether the session's role may do anything at all on
-- p_queue: whether it is the owner, or has a grant of any right there.
CREATE FUNCTION queenside.touches(p_queue text) RETURNS boolean
 LANGUAGE plpgsql STABLE SECURITY DEFINER
 SET search_path = pg_catalog, pg_temp
AS $function$
BEGIN
    RETURN queenside.is_owner() OR EXISTS (
        SELECT 1 FROM queenside.queue_grants g
         WHERE g.role = session_user::text COLLATE "default" AND queenside.matches(g.queue, p_queue));
END;
$function$;

-- renew_lease extends a live lease of group p_group on partition
-- p_partition to p_seconds from now (the queue's lease time when NULL);
-- an expiry never moves earlier. It returns the expiry, or no row for a
-- lease that is not live. consume.
CREATE FUNCTION queenside.renew_lease(p_group bigint, p_partition bigint, p_lease uuid, p_seconds integer)
 RETURNS SETOF timestamptz
 LANGUAGE plpgsql SECURITY DEFINER
 SET search_path = pg_catalog, pg_temp
AS $function$
BEGIN
    PERFORM queenside.consuming(p_group);
    -- The queue's lease time is read by a subquery, not joined: a stable
    -- expression (now() + an interval) of a joined column is refused by
    -- Citus in an UPDATE (SCALING.md, section 4, R4).
    RETURN QUERY
    UPDATE queenside.cursors c
       SET lease_expires_at = greatest(c.lease_expires_at, now() + make_interval(secs => coalesce(p_seconds,
               (SELECT q.lease_seconds FROM queenside.groups g JOIN queenside.queues q ON q.id = g.queue_id
                 WHERE g.id = p_group))))
     WHERE c.group_id = p_group AND c.partition_id = p_partition AND c.lease_id = p_lease AND c.lease_expires_at > now()
    RETURNING c.lease_expires_at;
END;
$function$;

-- release_lease gives a live lease back without charging any retry
-- budget, and returns its queue's name (no row for a lease that is not
-- live), whose waiting pops the caller wakes. consume.
CREATE FUNCTION queenside.release_lease(p_group bigint, p_partition bigint, p_lease uuid)
 RETURNS SETOF text
 LANGUAGE plpgsql SECURITY DEFINER
 SET search_path = pg_catalog, pg_temp
AS $function$
BEGIN
    PERFORM queenside.consuming(p_group);
    RETURN QUERY
    UPDATE queenside.cursors c SET lease_id = NULL, lease_done = NULL
     WHERE c.group_id = p_group AND c.partition_id = p_partition AND c.lease_id = p_lease AND c.lease_expires_at > now()
    RETURNING (SELECT q.name FROM queenside.groups g JOIN queenside.queues q ON q.id = g.queue_id WHERE g.id = c.group_id);
END;
$function$;

-- withdraw_lease takes back a lease a pop committed but the sidecar will
-- not send (a result too large for its response): the cursor is left as
-- if the pop had not leased it, the delivery it counted included. It
-- returns the queue's name, or no row for a lease no longer there. consume.
CREATE FUNCTION queenside.withdraw_lease(p_group bigint, p_partition bigint, p_lease uuid)
 RETURNS SETOF text
 LANGUAGE plpgsql SECURITY DEFINER
 SET search_path = pg_catalog, pg_temp
AS $function$
BEGIN
    PERFORM queenside.consuming(p_group);
    RETURN QUERY
    UPDATE queenside.cursors c
       SET lease_id = NULL, lease_done = NULL,
           delivered_to = CASE WHEN c.delivered_to[cardinality(c.delivered_to)] = c.lease_to
                               THEN trim_array(c.delivered_to, 1) ELSE c.delivered_to END
     WHERE c.group_id = p_group AND c.partition_id = p_partition AND c.lease_id = p_lease
    RETURNING (SELECT q.name FROM queenside.groups g JOIN queenside.queues q ON q.id = g.queue_id WHERE g.id = c.group_id);
END;
$function$;

-- queues_of_groups names the queues of groups p_groups, those the session's
-- role consumes as: the queues whose waiting pops an ack wakes.
CREATE FUNCTION queenside.queues_of_groups(p_groups bigint[])
 RETURNS SETOF text
 LANGUAGE plpgsql STABLE SECURITY DEFINER
 SET search_path = pg_catalog, pg_temp
AS $function$
BEGIN
    RETURN QUERY
    SELECT q.name FROM queenside.groups g JOIN queenside.queues q ON q.id = g.queue_id
     WHERE g.id = ANY (p_groups) AND queenside.may(q.name, 'consume', g.name);
END;
$function$;

-- control_state is what every sidecar follows: the maintenance state,
-- and which queues have consumption paused and which seal payloads, of
-- the queues the session's role touches at all.
CREATE FUNCTION queenside.control_state(OUT o_push boolean, OUT o_pop boolean, OUT o_push_since timestamptz,
                                        OUT o_pop_since timestamptz, OUT o_paused text[], OUT o_encrypted text[])
 LANGUAGE plpgsql STABLE SECURITY DEFINER
 SET search_path = pg_catalog, pg_temp
AS $function$
BEGIN
    SELECT m.push, m.pop, m.push_since, m.pop_since INTO o_push, o_pop, o_push_since, o_pop_since
      FROM queenside.maintenance m;
    SELECT coalesce(array_agg(q.name) FILTER (WHERE q.consumption_paused), '{}'),
           coalesce(array_agg(q.name) FILTER (WHERE q.encrypt_payloads), '{}')
      INTO o_paused, o_encrypted
      FROM queenside.queues q
     WHERE (q.consumption_paused OR q.encrypt_payloads) AND queenside.touches(q.name);
END;
$function$;

-- dedup_windows gives the deduplication window of each queue the
-- session's role touches at all, for a spool's replay.
CREATE FUNCTION queenside.dedup_windows()
 RETURNS TABLE(o_queue text, o_window_seconds integer)
 LANGUAGE plpgsql STABLE SECURITY DEFINER
 SET search_path = pg_catalog, pg_temp
AS $function$
BEGIN
    RETURN QUERY SELECT q.name, q.dedup_window_seconds FROM queenside.queues q WHERE queenside.touches(q.name);
END;
$function$;

-- The spool's replay progress (version 20), by the segment's identity.
-- A sidecar's own bookkeeping: keyed by a digest no other sidecar knows
-- until it adopts the file, it needs no right. A mark only moves forward:
-- a replay that read an older one and stored nothing new must not take
-- it back.
CREATE FUNCTION queenside.mark_replayed(p_segment uuid, p_end bigint)
 RETURNS void
 LANGUAGE plpgsql SECURITY DEFINER
 SET search_path = pg_catalog, pg_temp
AS $function$
BEGIN
    INSERT INTO queenside.spool_progress AS sp (segment, replayed_to) VALUES (p_segment, p_end)
    ON CONFLICT (segment) DO UPDATE
    SET replayed_to = greatest(sp.replayed_to, excluded.replayed_to), updated_at = now();
END;
$function$;

-- replayed_to is how far the segment is replayed: 0 when nothing of it is
-- recorded.
CREATE FUNCTION queenside.replayed_to(p_segment uuid)
 RETURNS bigint
 LANGUAGE plpgsql STABLE SECURITY DEFINER
 SET search_path = pg_catalog, pg_temp
AS $function$
BEGIN
    RETURN coalesce((SELECT sp.replayed_to FROM queenside.spool_progress sp WHERE sp.segment = p_segment), 0);
END;
$function$;

-- forget_replayed removes the mark of a retired segment, and any mark no
-- sidecar updated for 30 days: a segment left half replayed that long
-- belonged to a pod whose volume is gone, or its sidecar would have gone
-- on with it. The age is not the caller's to choose: a shorter one would
-- forget another sidecar's progress.
CREATE FUNCTION queenside.forget_replayed(p_segment uuid)
 RETURNS void
 LANGUAGE plpgsql SECURITY DEFINER
 SET search_path = pg_catalog, pg_temp
AS $function$
BEGIN
    DELETE FROM queenside.spool_progress sp WHERE sp.segment = p_segment OR sp.updated_at < now() - interval '30 days';
END;
$function$;
