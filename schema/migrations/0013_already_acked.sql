-- queenside storage, version 13: an ack sent twice says so.
--
-- An ack item whose lease is no longer live answered lease_expired, even
-- when the message it names had been acknowledged already (the same ack
-- sent twice, or sent again after an answer that was lost): a consumer
-- could not tell a harmless repeat from an ack that came too late, whose
-- message will be delivered again. Such an item, whose message the
-- group's cursor has passed, now answers already_acked; nothing is
-- recorded for it either way. Items named by transaction id are resolved
-- first, so they are told apart too.
--
-- Sidecars of version 12 pass the code on as they get it.

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
$function$
;
