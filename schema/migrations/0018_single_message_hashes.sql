-- queenside storage, version 18: a segment of one message holds its
-- message's transaction-id hash itself, not in a dedup row.
--
-- At a trickle every push stores one message in a partition, and each
-- such message cost two inserted rows: its segment and its dedup row (a
-- heap tuple and a hash-index entry, for the probe of exact dedup). The
-- segment now carries the hash in a column of its own, indexed by
-- (hash, partition_id) for the rows that have one. The hash leads, as it
-- does in dedup_key: led by partition_id, the index let the probe of a
-- push over a hundred partitions be planned as a merge join reading every
-- hash of those partitions (a cost that grows with what they keep), where
-- led by the hash the only plan is a look-up a message. A segment of several
-- messages keeps a dedup row a message as before, since an index entry
-- needs a row of its own. Every reader of the hashes (push's probe and its
-- general path, ack by transaction id, the lookup of a transaction id)
-- reads both places and takes the newest message of a hash: a segment
-- cannot drop the hash it holds when a later message takes the hash over.
-- When the janitor deletes such a segment before its hash is due, the hash
-- moves into a dedup row in the same transaction, and goes with the other
-- kept hashes of that pass (orphan_hashes). The dedup purge passes over
-- the segments that hold their hash: they have no row to delete, and the
-- hash goes with the segment.
--
-- On an existing database the column is added without a rewrite (it has
-- no default), but the ALTER's lock on segments (ACCESS EXCLUSIVE) is held
-- to the end of the migration, while the index is built by one scan of the
-- table: pushes, pops and acks wait for it (BENCHMARKS.md gives the time
-- for a million messages). The dedup rows already stored stay, and are
-- purged as before.

ALTER TABLE queenside.segments ADD COLUMN hash uuid;
CREATE INDEX segments_hash ON queenside.segments (hash, partition_id) WHERE hash IS NOT NULL;

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

CREATE OR REPLACE FUNCTION queenside.expire_segments(p_from bigint, p_max_segments integer, p_max_messages integer, OUT next_from bigint, OUT segments integer, OUT messages bigint, OUT orphaned integer)
 RETURNS record
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_now    timestamptz := now();
    w        record;
    g        record;
    v_due    bigint;
    v_bound  bigint;
    v_cap    bigint;
    v_hashes uuid[];
    v_txids  text[];     -- of the segments deleted in a partition whose hashes stay
    v_moved  uuid[];     -- the hashes of those that held one message, as dedup rows
    v_m_off  bigint[];
    v_m_mid  uuid[];
    v_m_at   timestamptz[];
    v_last   bigint;
    v_at     timestamptz;
BEGIN
    segments := 0; messages := 0; orphaned := 0;
    -- The partitions whose first segment may go by its age: one index
    -- probe each.
    FOR w IN
        SELECT p.id, p.queue_id, f.base_offset AS first_base, f.last_offset AS first_last, f.committed_at AS first_at,
               q.retention_seconds, q.completed_retention_seconds,
               queenside.dedup_keep(q.dedup_window_seconds, q.completed_retention_seconds) AS keep,
               coalesce(m.purged_to, 0) AS purged_to
          FROM queenside.partitions p
          JOIN queenside.queues q ON q.id = p.queue_id
         CROSS JOIN LATERAL (SELECT s.base_offset, s.last_offset, s.committed_at FROM queenside.segments s
                              WHERE s.partition_id = p.id ORDER BY s.last_offset LIMIT 1) f
          LEFT JOIN queenside.dedup_marks m ON m.partition_id = p.id
         WHERE p.id >= p_from
           AND ((q.retention_seconds > 0 AND f.committed_at < v_now - make_interval(secs => q.retention_seconds))
                OR f.committed_at < v_now - make_interval(secs => q.completed_retention_seconds))
         ORDER BY p.id
    LOOP
        -- Not retained past its retention, and old enough as consumed, but
        -- not yet consumed by every group: nothing goes.
        CONTINUE WHEN NOT (w.retention_seconds > 0 AND w.first_at < v_now - make_interval(secs => w.retention_seconds))
                  AND w.first_last >= queenside.consumed_to(w.id, w.queue_id);
        IF segments >= p_max_segments OR messages >= p_max_messages THEN
            next_from := w.id;
            RETURN;
        END IF;
        -- The segments below v_due may go. first_offset_at is the first
        -- offset committed at or after a time, so everything below it is
        -- older; consumed_to bounds what every group has consumed.
        v_due := greatest(
            CASE WHEN w.retention_seconds > 0
                 THEN queenside.first_offset_at(w.id, v_now - make_interval(secs => w.retention_seconds))
                 ELSE 0 END,
            least(queenside.consumed_to(w.id, w.queue_id),
                  queenside.first_offset_at(w.id, v_now - make_interval(secs => w.completed_retention_seconds))));
        -- Those below v_bound go now, within what is left of the budget:
        -- offsets are gapless, so the messages below an offset are counted
        -- from the first retained one.
        v_bound := least(v_due, greatest(w.first_last + 1, w.first_base + (p_max_messages - messages)));
        v_cap := (SELECT s.last_offset FROM queenside.segments s
                   WHERE s.partition_id = w.id AND s.last_offset < v_bound
                   ORDER BY s.last_offset OFFSET p_max_segments - segments - 1 LIMIT 1);
        IF v_cap IS NOT NULL THEN
            v_bound := v_cap + 1;
        END IF;
        -- The segments whose hashes the dedup purge has not reached yet
        -- leave them behind, to be deleted once they are due: one row for
        -- all of them, due when the newest is (a hash kept a little
        -- longer than its own due time is harmless). At a trickle every
        -- segment holds one message, and a row each doubled what the
        -- janitor wrote and kept.
        v_txids := '{}';
        v_moved := '{}'; v_m_off := '{}'; v_m_mid := '{}'; v_m_at := '{}';
        v_last := NULL;
        v_at := NULL;
        FOR g IN
            DELETE FROM queenside.segments s
             WHERE s.partition_id = w.id AND s.last_offset < v_bound
            RETURNING s.last_offset, s.base_offset, s.committed_at, s.hash, s.message_ids[1] AS message_id,
                      CASE WHEN s.last_offset >= w.purged_to THEN s.transaction_ids END AS txids
        LOOP
            segments := segments + 1;
            messages := messages + (g.last_offset - g.base_offset + 1);
            CONTINUE WHEN g.txids IS NULL;
            v_txids := v_txids || g.txids;
            IF g.hash IS NOT NULL THEN
                v_moved := v_moved || g.hash;
                v_m_off := v_m_off || g.last_offset;
                v_m_mid := v_m_mid || g.message_id;
                v_m_at := v_m_at || g.committed_at;
            END IF;
            v_last := greatest(v_last, g.last_offset);
            v_at := greatest(v_at, g.committed_at);
        END LOOP;
        -- A segment of one message held its hash itself (push): the hash
        -- outlives it as a dedup row, in the same transaction, so that a
        -- probe sees it in one place or the other. The row is among the
        -- hashes kept below, and goes with them.
        IF cardinality(v_moved) > 0 THEN
            INSERT INTO queenside.dedup (partition_id, hash, msg_offset, message_id, committed_at)
            SELECT w.id, m.h, m.o, m.mid, m.at FROM unnest(v_moved, v_m_off, v_m_mid, v_m_at) AS m (h, o, mid, at);
        END IF;
        IF v_last IS NOT NULL THEN
            v_hashes := ARRAY(SELECT DISTINCT queenside.transaction_hash(t) FROM unnest(v_txids) t);
            INSERT INTO queenside.orphan_hashes (purge_after, partition_id, last_offset, committed_at, hashes)
            VALUES (v_at + w.keep, w.id, v_last, v_at, v_hashes);
            orphaned := orphaned + 1;
        END IF;
        IF v_bound < v_due THEN -- the budget cut this partition short
            next_from := w.id;
            RETURN;
        END IF;
    END LOOP;
END;
$function$
;

CREATE OR REPLACE FUNCTION queenside.push(p_route bigint, p_ids bigint[], p_starts integer[], p_counts integer[], p_slots integer[], p_hashes uuid[], p_leaders integer[], p_message_ids uuid[], p_transaction_ids text[], p_payloads bytea[], p_trace_ids text[], p_headers bytea[], OUT committed_at timestamp with time zone, OUT bases bigint[], OUT dedup_on boolean[], OUT dup_positions integer[], OUT dup_offsets bigint[], OUT dup_message_ids uuid[], OUT dup_committed_at timestamp with time zone[])
 RETURNS record
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET enable_bitmapscan TO 'off'
 SET jit TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
    -- p_route: on Citus, a partition of the call's shard (every partition
    -- of the call is on it), by which the call is sent to that shard's
    -- worker (schema.Distribute); NULL on one PostgreSQL.
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
         WHERE p.id = c.id AND p.id = ANY (p_ids)
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
    -- every message is new. A hash is stored in one of two places: a
    -- segment of one message holds its message's hash itself (a trickle
    -- writes one row a message, not two), a segment of several has a dedup
    -- row a message. Only push stores a new hash, and only under the row
    -- lock of its partition, which this call holds: what this probe does
    -- not find cannot appear before the commit, and a plain insert
    -- follows. (The janitor moves the hash of a segment it deletes into a
    -- dedup row in the same transaction; one statement reads both places,
    -- so it sees the hash in one or the other.) Anything found, inside its
    -- window or not, takes the general path.
    IF p_leaders IS NULL AND NOT EXISTS (
           SELECT 1 FROM unnest(p_slots, p_hashes) AS u (s, h)
             JOIN queenside.dedup d ON uuid_hash_extended(d.hash, d.partition_id) = uuid_hash_extended(u.h, p_ids[u.s]) AND d.hash = u.h AND d.partition_id = p_ids[u.s]
            WHERE d.partition_id = ANY (p_ids)
           UNION ALL
           SELECT 1 FROM unnest(p_slots, p_hashes) AS u (s, h)
             JOIN queenside.segments g ON g.partition_id = p_ids[u.s] AND g.hash = u.h
            WHERE g.partition_id = ANY (p_ids)) THEN
        IF n > cardinality(p_ids) THEN -- some segment holds several messages
            INSERT INTO queenside.dedup (partition_id, hash, msg_offset, message_id, committed_at)
            SELECT p_ids[u.s], u.h, bases[u.s] + (u.o - p_starts[u.s]), u.m, v_at
              FROM unnest(p_slots, p_hashes, p_message_ids) WITH ORDINALITY AS u (s, h, m, o)
             WHERE p_counts[u.s] > 1;
        END IF;
        v_count := n;
    END IF;

    IF v_count = n THEN -- every message is new
        IF cardinality(p_ids) = 1 THEN -- the segment is the input as it is
            INSERT INTO queenside.segments (partition_id, last_offset, base_offset, committed_at,
                                            message_ids, transaction_ids, payloads, trace_ids, headers, hash)
            VALUES (p_ids[1], bases[1] + n - 1, bases[1], v_at,
                    p_message_ids, p_transaction_ids, p_payloads, p_trace_ids, p_headers,
                    CASE WHEN n = 1 THEN p_hashes[1] END);
        ELSIF n = cardinality(p_ids) THEN -- one message per partition
            -- Elements, not slices: an array parameter is held expanded,
            -- so an element is read in place, while every slice would
            -- flatten the whole array first.
            INSERT INTO queenside.segments (partition_id, last_offset, base_offset, committed_at,
                                            message_ids, transaction_ids, payloads, trace_ids, headers, hash)
            SELECT p_ids[k], bases[k], bases[k], v_at,
                   ARRAY[p_message_ids[p_starts[k]]], ARRAY[p_transaction_ids[p_starts[k]]],
                   ARRAY[p_payloads[p_starts[k]]],
                   CASE WHEN p_trace_ids IS NOT NULL THEN ARRAY[p_trace_ids[p_starts[k]]] END,
                   CASE WHEN p_headers IS NOT NULL THEN ARRAY[p_headers[p_starts[k]]] END,
                   p_hashes[p_starts[k]]
              FROM generate_subscripts(p_ids, 1) AS k;
        ELSE -- each partition's segment is its run of the input
            INSERT INTO queenside.segments (partition_id, last_offset, base_offset, committed_at,
                                            message_ids, transaction_ids, payloads, trace_ids, headers, hash)
            SELECT p_ids[k], bases[k] + p_counts[k] - 1, bases[k], v_at,
                   p_message_ids[p_starts[k] : p_starts[k] + p_counts[k] - 1],
                   p_transaction_ids[p_starts[k] : p_starts[k] + p_counts[k] - 1],
                   p_payloads[p_starts[k] : p_starts[k] + p_counts[k] - 1],
                   p_trace_ids[p_starts[k] : p_starts[k] + p_counts[k] - 1],
                   p_headers[p_starts[k] : p_starts[k] + p_counts[k] - 1],
                   CASE WHEN p_counts[k] = 1 THEN p_hashes[p_starts[k]] END
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
         WHERE p.id = b.id AND p.id = ANY (p_ids);
        PERFORM queenside.push_general(v_at, p_ids, bases, p_slots, p_hashes, p_leaders,
                                       p_message_ids, p_transaction_ids, p_payloads, p_trace_ids, p_headers);
        UPDATE queenside.cursors cu SET head_at = v_at
          FROM unnest(p_ids, bases) AS b (id, base)
          JOIN queenside.partitions p ON p.id = b.id
         WHERE p.next_offset > b.base AND p.id = ANY (p_ids) AND cu.partition_id = ANY (p_ids)
           AND cu.partition_id = b.id AND cu.head_at IS NULL AND cu.committed IS NOT NULL;
        -- The messages stored already, with their originals: each leader's
        -- newest stored message of its hash, when it lies below the
        -- partition's base (one at or above it is this call's own: a hash
        -- outside its window, taken over).
        -- Joins, not a LIMIT 1 lateral look-up, which Citus cannot plan
        -- beside a table function; one row a stored hash all the same.
        SELECT array_agg(x.o ORDER BY x.o), array_agg(x.msg_offset ORDER BY x.o),
               array_agg(x.message_id ORDER BY x.o), array_agg(x.committed_at ORDER BY x.o)
          INTO dup_positions, dup_offsets, dup_message_ids, dup_committed_at
          FROM (SELECT DISTINCT ON (k.o) k.o, k.msg_offset, k.message_id, k.committed_at, k.base
                  FROM (SELECT u.o, d.msg_offset, d.message_id, d.committed_at, bases[u.s] AS base
                          FROM unnest(p_slots, p_hashes, coalesce(p_leaders, '{}')) WITH ORDINALITY AS u (s, h, l, o)
                          JOIN queenside.dedup d
                            ON uuid_hash_extended(d.hash, d.partition_id) = uuid_hash_extended(u.h, p_ids[u.s]) AND
                               d.partition_id = p_ids[u.s] AND d.hash = u.h
                         WHERE d.partition_id = ANY (p_ids) AND coalesce(u.l, u.o) = u.o
                        UNION ALL
                        SELECT u.o, g.last_offset, g.message_ids[1], g.committed_at, bases[u.s]
                          FROM unnest(p_slots, p_hashes, coalesce(p_leaders, '{}')) WITH ORDINALITY AS u (s, h, l, o)
                          JOIN queenside.segments g ON g.partition_id = p_ids[u.s] AND g.hash = u.h
                         WHERE g.partition_id = ANY (p_ids) AND coalesce(u.l, u.o) = u.o) k
                 ORDER BY k.o, k.msg_offset DESC) x
         WHERE x.msg_offset < x.base;
    END IF;

    -- Wake the pops waiting on these queues, on every sidecar. Delivered
    -- at commit; identical notifications of one transaction fold into one.
    -- A call routed to its shard (p_route, on Citus) may run on a worker,
    -- where no sidecar listens: its caller wakes them, on the coordinator,
    -- once the call committed.
    IF p_route IS NULL THEN
        PERFORM queenside.wake(w) FROM unnest(v_queues) AS w;
    END IF;
END;
$function$
;

CREATE OR REPLACE FUNCTION queenside.push_general(p_at timestamp with time zone, p_ids bigint[], p_bases bigint[], p_slots integer[], p_hashes uuid[], p_leaders integer[], p_message_ids uuid[], p_transaction_ids text[], p_payloads bytea[], p_trace_ids text[], p_headers bytea[])
 RETURNS void
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_pids    bigint[];
    v_windows integer[];
    v_dedup   boolean[];     -- by slot (p_ids' order): the queue deduplicates
    v_cutoff  timestamptz[]; -- and its window starts then
    v_held    bigint[];      -- the messages whose hash a stored message inside the window holds
    f_pid     bigint[];
    f_off     bigint[];
    f_h       uuid[];
    f_m       uuid[];
    f_txid    text[];
    f_payload bytea[];
    f_trace   text[];
    f_hdr     bytea[];
    v_single  bigint[];      -- the partitions where the call stores one message
BEGIN
    -- Each step reads one kind of row by its partitions, and what is
    -- worked out from them is worked out from arrays: on Citus a query
    -- correlating a distributed table with the call's input cannot be
    -- planned (SCALING.md, section 4).
    SELECT array_agg(p.id), array_agg(q.dedup_window_seconds) INTO v_pids, v_windows
      FROM queenside.partitions p JOIN queenside.queues q ON q.id = p.queue_id
     WHERE p.id = ANY (p_ids);
    v_dedup := ARRAY(SELECT v_windows[array_position(v_pids, u.id)] > 0
                       FROM unnest(p_ids) WITH ORDINALITY AS u (id, o) ORDER BY u.o);
    v_cutoff := ARRAY(SELECT p_at - make_interval(secs => v_windows[array_position(v_pids, u.id)])
                        FROM unnest(p_ids) WITH ORDINALITY AS u (id, o) ORDER BY u.o);
    -- In both places a hash is stored (push).
    SELECT array_agg(k.o) INTO v_held
      FROM (SELECT u.o
              FROM unnest(p_slots, p_hashes) WITH ORDINALITY AS u (s, h, o)
              JOIN queenside.dedup d ON uuid_hash_extended(d.hash, d.partition_id) = uuid_hash_extended(u.h, p_ids[u.s])
                                    AND d.hash = u.h AND d.partition_id = p_ids[u.s]
             WHERE d.partition_id = ANY (p_ids) AND v_dedup[u.s]
               AND d.msg_offset < p_bases[u.s] AND d.committed_at > v_cutoff[u.s]
            UNION
            SELECT u.o
              FROM unnest(p_slots, p_hashes) WITH ORDINALITY AS u (s, h, o)
              JOIN queenside.segments g ON g.partition_id = p_ids[u.s] AND g.hash = u.h
             WHERE g.partition_id = ANY (p_ids) AND v_dedup[u.s]
               AND g.last_offset < p_bases[u.s] AND g.committed_at > v_cutoff[u.s]) k;

    -- The messages to store, with their offsets: every one in a queue that
    -- does not deduplicate; elsewhere the first of each hash in the call
    -- (its leader) whose hash no message inside the window holds.
    SELECT array_agg(f.pid ORDER BY f.pid, f.off), array_agg(f.off ORDER BY f.pid, f.off),
           array_agg(f.h ORDER BY f.pid, f.off), array_agg(f.m ORDER BY f.pid, f.off),
           array_agg(f.txid ORDER BY f.pid, f.off), array_agg(f.payload ORDER BY f.pid, f.off),
           array_agg(f.trace ORDER BY f.pid, f.off), array_agg(f.hdr ORDER BY f.pid, f.off)
      INTO f_pid, f_off, f_h, f_m, f_txid, f_payload, f_trace, f_hdr
      FROM (SELECT p_ids[x.s] AS pid, x.h, x.m, x.txid, x.payload, x.trace, x.hdr,
                   p_bases[x.s] + row_number() OVER (PARTITION BY x.s ORDER BY x.o) - 1 AS off
              FROM unnest(p_slots, p_hashes, coalesce(p_leaders, '{}'), p_message_ids, p_transaction_ids,
                          p_payloads, p_trace_ids, p_headers)
                   WITH ORDINALITY AS x (s, h, l, m, txid, payload, trace, hdr, o)
             WHERE NOT v_dedup[x.s]
                OR (coalesce(x.l, x.o) = x.o AND NOT (x.o = ANY (coalesce(v_held, '{}'))))) f;
    IF f_pid IS NULL THEN
        RETURN;
    END IF;
    -- A hash a stored message takes over: outside its window, or in a
    -- queue that does not deduplicate. A segment of one message keeps the
    -- hash it holds: look-ups take the newest message of a hash.
    v_single := ARRAY(SELECT x.pid FROM unnest(f_pid) AS x (pid) GROUP BY x.pid HAVING count(*) = 1);
    DELETE FROM queenside.dedup d
     USING (SELECT DISTINCT x.pid, x.h FROM unnest(f_pid, f_h) AS x (pid, h)) x
     WHERE uuid_hash_extended(d.hash, d.partition_id) = uuid_hash_extended(x.h, x.pid) AND d.hash = x.h
       AND d.partition_id = x.pid AND d.partition_id = ANY (p_ids);
    INSERT INTO queenside.dedup (partition_id, hash, msg_offset, message_id, committed_at)
    SELECT DISTINCT ON (f.pid, f.h) f.pid, f.h, f.off, f.m, p_at
      FROM unnest(f_pid, f_h, f_off, f_m) AS f (pid, h, off, m)
     WHERE NOT (f.pid = ANY (v_single))
     ORDER BY f.pid, f.h, f.off DESC;
    INSERT INTO queenside.segments (partition_id, last_offset, base_offset, committed_at,
                                    message_ids, transaction_ids, payloads, trace_ids, headers, hash)
    SELECT f.pid, max(f.off), min(f.off), p_at,
           array_agg(f.m ORDER BY f.off), array_agg(f.txid ORDER BY f.off),
           array_agg(f.payload ORDER BY f.off),
           CASE WHEN bool_or(f.trace IS NOT NULL) THEN array_agg(f.trace ORDER BY f.off) END,
           CASE WHEN bool_or(f.hdr IS NOT NULL) THEN array_agg(f.hdr ORDER BY f.off) END,
           CASE WHEN count(*) = 1 THEN (array_agg(f.h))[1] END
      FROM unnest(f_pid, f_off, f_m, f_txid, f_payload, f_trace, f_hdr, f_h) AS f (pid, off, m, txid, payload, trace, hdr, h)
     GROUP BY f.pid;
    UPDATE queenside.partitions p
       SET next_offset = c.last + 1, last_committed_at = p_at
      FROM (SELECT f.pid, max(f.off) AS last FROM unnest(f_pid, f_off) AS f (pid, off) GROUP BY f.pid) c
     WHERE p.id = c.pid AND p.id = ANY (p_ids);
END;
$function$
;

CREATE OR REPLACE FUNCTION queenside.purge_dedup(p_from bigint, p_max_segments integer, p_max_messages integer, OUT next_from bigint, OUT segments integer, OUT messages bigint, OUT hashes bigint)
 RETURNS record
 LANGUAGE plpgsql
 SET enable_hashjoin TO 'off'
 SET enable_mergejoin TO 'off'
 SET enable_seqscan TO 'off'
AS $function$
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
        -- later message with the same transaction id is that message's. A
        -- segment that holds its hash itself has no dedup row to delete.
        WITH seg AS MATERIALIZED (
            SELECT s.last_offset, s.base_offset, s.transaction_ids, s.hash FROM queenside.segments s
             WHERE s.partition_id = w.id AND s.last_offset >= w.first_last AND s.last_offset < v_bound
        ), gone AS (
            DELETE FROM queenside.dedup d
             USING (SELECT DISTINCT queenside.transaction_hash(t) AS h FROM seg, unnest(seg.transaction_ids) t
                     WHERE seg.hash IS NULL) x
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
$function$
;
