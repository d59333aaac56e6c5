-- queenside storage, version 16: the hashes of expired segments kept as
-- one row a partition a janitor pass, not a row a segment.
--
-- A segment that retention deletes before the dedup purge reached it
-- leaves its hashes in orphan_hashes, to be purged when they are due. At a
-- trickle every segment holds one message, so with a completed retention
-- shorter than the hashes are kept (15 minutes at the least) the janitor
-- wrote a row a message there, beside the message's dedup row, and kept
-- it as long: at 5,000 msg/s over 1,000 partitions, 1.5 million rows and
-- 240 MB after five minutes. A pass now keeps the hashes of a partition's
-- deleted segments in one row, due when the newest of them is. Rows made
-- before this version stay as they are, and are purged as before.

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
        v_last := NULL;
        v_at := NULL;
        FOR g IN
            DELETE FROM queenside.segments s
             WHERE s.partition_id = w.id AND s.last_offset < v_bound
            RETURNING s.last_offset, s.base_offset, s.committed_at,
                      CASE WHEN s.last_offset >= w.purged_to THEN s.transaction_ids END AS txids
        LOOP
            segments := segments + 1;
            messages := messages + (g.last_offset - g.base_offset + 1);
            CONTINUE WHEN g.txids IS NULL;
            v_txids := v_txids || g.txids;
            v_last := greatest(v_last, g.last_offset);
            v_at := greatest(v_at, g.committed_at);
        END LOOP;
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
