-- ack_call applies a whole ack call in one statement, whatever the number
-- of leases it names. The common case, a lease whose items all completed,
-- by offset, a run that reaches the end of the lease from at or below the
-- cursor, is one set-based update for all such leases of the call: the
-- cursor moves past the lease and the lease is released. Every other lease
-- goes through queenside.ack (0003) as before, with the same answers.
-- With the cursor_head below, an ack of one lease and 100 items went from
-- 0.89-0.95 ms of PostgreSQL to 0.60-0.75 ms, and in the mixed scenario
-- from 11.1 to 8.8 µs a message (BENCHMARKS.md).
--
-- p_groups, p_partitions and p_leases describe the leases of the call (one
-- slot each); item i belongs to slot p_slots[i] and carries p_offsets[i]
-- (NULL when named by transaction id, whose hash is p_hashes[i]),
-- p_failed[i] and p_errors[i]. The answer has a row per item, idx being
-- its position in the call.
CREATE FUNCTION queenside.ack_call(p_groups bigint[], p_partitions bigint[], p_leases uuid[],
                                   p_slots integer[], p_offsets bigint[], p_hashes uuid[],
                                   p_failed boolean[], p_errors text[])
RETURNS TABLE (idx integer, success boolean, code text, dead_lettered boolean, released boolean, cursor_offset bigint)
LANGUAGE plpgsql
SET jit = off
AS $$
DECLARE
    v_fast  integer[]; -- slots applied by the set-based update
    v_cur   bigint[];  -- and the cursor each now stands at
    v_items integer[];
    k       integer;
BEGIN
    -- Every cursor of the call, locked in (group, partition) order, so two
    -- calls can never deadlock (ack locks its row again: a no-op).
    PERFORM 1 FROM queenside.cursors cu
      JOIN unnest(p_groups, p_partitions) AS l (g, p) ON cu.group_id = l.g AND cu.partition_id = l.p
     ORDER BY cu.group_id, cu.partition_id
       FOR UPDATE OF cu;

    -- The common case. Completed offsets forming a gapless run lo..hi, with
    -- lo between the lease's start and the cursor and hi its last offset,
    -- move the cursor to hi + 1 exactly as ack would: the run covers the
    -- cursor's own message (so no message deleted by retention is in the
    -- way), and every completion remembered past a gap lies inside it.
    WITH runs AS (
        SELECT u.s, min(u.o) AS lo, max(u.o) AS hi, count(DISTINCT u.o) AS n,
               bool_and(NOT u.f AND u.o IS NOT NULL) AS plain
          FROM unnest(p_slots, p_offsets, p_failed) AS u (s, o, f)
         GROUP BY u.s
    ), done AS (
        UPDATE queenside.cursors cu
           SET committed = r.hi + 1, head_at = queenside.cursor_head(cu.partition_id, r.hi + 1),
               lease_id = NULL, lease_done = NULL,
               delivered_to = ARRAY(SELECT x FROM unnest(cu.delivered_to) x WHERE x > r.hi ORDER BY x),
               fail_offsets = ARRAY(SELECT o FROM unnest(cu.fail_offsets) o WHERE o > r.hi ORDER BY o),
               fail_counts = ARRAY(SELECT c FROM unnest(cu.fail_offsets, cu.fail_counts) f (o, c)
                                    WHERE o > r.hi ORDER BY o)
          FROM runs r
         WHERE r.plain AND r.hi - r.lo + 1 = r.n
           AND cu.group_id = p_groups[r.s] AND cu.partition_id = p_partitions[r.s]
           AND cu.lease_id = p_leases[r.s] AND cu.lease_expires_at > now()
           AND r.hi = cu.lease_to AND r.lo >= cu.lease_from AND r.lo <= cu.committed
        RETURNING r.s, r.hi + 1 AS cur
    )
    SELECT array_agg(d.s), array_agg(d.cur) INTO v_fast, v_cur FROM done d;

    RETURN QUERY
    SELECT u.i::integer, true, NULL::text, false, true, f.cur
      FROM unnest(p_slots) WITH ORDINALITY AS u (s, i)
      JOIN unnest(v_fast, v_cur) AS f (s, cur) ON f.s = u.s;

    -- The rest, lease by lease in (group, partition) order.
    FOR k IN
        SELECT l.k FROM unnest(p_groups, p_partitions) WITH ORDINALITY AS l (g, p, k)
         WHERE v_fast IS NULL OR NOT (l.k::integer = ANY (v_fast))
         ORDER BY l.g, l.p
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

-- cursor_head, as in 0001, with its lookups written inline: PL/pgSQL keeps
-- their plans for the session, while the SQL function head_at it called
-- was planned again in every transaction (50 µs of each ack and pop that
-- moves a cursor, 120 µs at the end of a partition).
CREATE OR REPLACE FUNCTION queenside.cursor_head(p_partition bigint, p_offset bigint) RETURNS timestamptz
LANGUAGE plpgsql AS $$
DECLARE
    v_at timestamptz;
BEGIN
    SELECT s.committed_at INTO v_at FROM queenside.segments s
     WHERE s.partition_id = p_partition AND s.last_offset >= p_offset
     ORDER BY s.last_offset LIMIT 1;
    IF FOUND THEN
        RETURN v_at;
    END IF;
    PERFORM 1 FROM queenside.partitions p WHERE p.id = p_partition FOR KEY SHARE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN now();
    END IF;
    SELECT s.committed_at INTO v_at FROM queenside.segments s
     WHERE s.partition_id = p_partition AND s.last_offset >= p_offset
     ORDER BY s.last_offset LIMIT 1;
    RETURN v_at;
END;
$$;
