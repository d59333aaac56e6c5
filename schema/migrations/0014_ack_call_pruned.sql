-- queenside storage, version 14: ack_call's statements each on their
-- partitions (SCALING.md, section 4).
--
-- Every statement of ack_call on a distributed table also says partition
-- id = ANY (p_partitions) (R1, and R2 for the cursors it locks first), and
-- the head of a cursor at the end of its partition is v_now, now() read once
-- into a variable, where it was now() inside a CASE (R5): now() is the
-- transaction's start either way. The cursors are still locked in
-- (partition, group) order. The signature stays.

CREATE OR REPLACE FUNCTION queenside.ack_call(p_groups bigint[], p_partitions bigint[], p_leases uuid[], p_slots integer[], p_offsets bigint[], p_hashes uuid[], p_failed boolean[], p_errors text[])
 RETURNS TABLE(idx integer, success boolean, code text, dead_lettered boolean, released boolean, cursor_offset bigint)
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET enable_hashjoin TO 'off'
 SET enable_mergejoin TO 'off'
 SET jit TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
    v_fast  integer[]; -- slots applied by the set-based update
    v_cur   bigint[];  -- and the cursor each now stands at
    v_items integer[];
    v_now   timestamptz := now();
    k       integer;
BEGIN
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
                                     WHERE s.partition_id = r.p AND s.partition_id = ANY (p_partitions)
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
                              WHERE l.id = r.p AND l.id = ANY (p_partitions) AND r.hi + 1 >= p.next_offset
                                FOR SHARE SKIP LOCKED) lk ON true
         WHERE cu.partition_id = r.p AND cu.group_id = r.g
           AND cu.partition_id = ANY (p_partitions) AND p.id = ANY (p_partitions)
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
                             ARRAY(SELECT p_errors[i] FROM unnest(v_items) WITH ORDINALITY AS x (i, o) ORDER BY x.o)) a;
    END LOOP;
END;
$function$;
