-- queenside storage, version 13: push's statements each on their
-- partitions (SCALING.md, section 4).
--
-- push names its partitions by a join with unnest of its arrays, which
-- prunes nothing on Citus (R1): every statement on a distributed table now
-- also says partition id = ANY (p_ids), which on one PostgreSQL changes no
-- plan's order (the partition rows are still locked in id order, through
-- the primary key). push_general, the path of a call that meets a stored
-- hash, was one SQL-language statement of four modifying CTEs (R7, R9): it
-- is PL/pgSQL, the messages to store worked out first, then one statement
-- a step, in the order the CTEs' effects had. Which messages a stored hash
-- holds back is read by one join of the call's hashes with dedup (as push
-- probes them), and the rest is worked out from arrays: a query that
-- correlates dedup with the call's input cannot be planned on Citus. The
-- signatures stay.

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
    SELECT array_agg(u.o) INTO v_held
      FROM unnest(p_slots, p_hashes) WITH ORDINALITY AS u (s, h, o)
      JOIN queenside.dedup d ON uuid_hash_extended(d.hash, d.partition_id) = uuid_hash_extended(u.h, p_ids[u.s])
                            AND d.hash = u.h AND d.partition_id = p_ids[u.s]
     WHERE d.partition_id = ANY (p_ids) AND v_dedup[u.s]
       AND d.msg_offset < p_bases[u.s] AND d.committed_at > v_cutoff[u.s];

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
    -- queue that does not deduplicate.
    DELETE FROM queenside.dedup d
     USING (SELECT DISTINCT x.pid, x.h FROM unnest(f_pid, f_h) AS x (pid, h)) x
     WHERE uuid_hash_extended(d.hash, d.partition_id) = uuid_hash_extended(x.h, x.pid) AND d.hash = x.h
       AND d.partition_id = x.pid AND d.partition_id = ANY (p_ids);
    INSERT INTO queenside.dedup (partition_id, hash, msg_offset, message_id, committed_at)
    SELECT DISTINCT ON (f.pid, f.h) f.pid, f.h, f.off, f.m, p_at
      FROM unnest(f_pid, f_h, f_off, f_m) AS f (pid, h, off, m)
     ORDER BY f.pid, f.h, f.off DESC;
    INSERT INTO queenside.segments (partition_id, last_offset, base_offset, committed_at,
                                    message_ids, transaction_ids, payloads, trace_ids, headers)
    SELECT f.pid, max(f.off), min(f.off), p_at,
           array_agg(f.m ORDER BY f.off), array_agg(f.txid ORDER BY f.off),
           array_agg(f.payload ORDER BY f.off),
           CASE WHEN bool_or(f.trace IS NOT NULL) THEN array_agg(f.trace ORDER BY f.off) END,
           CASE WHEN bool_or(f.hdr IS NOT NULL) THEN array_agg(f.hdr ORDER BY f.off) END
      FROM unnest(f_pid, f_off, f_m, f_txid, f_payload, f_trace, f_hdr) AS f (pid, off, m, txid, payload, trace, hdr)
     GROUP BY f.pid;
    UPDATE queenside.partitions p
       SET next_offset = c.last + 1, last_committed_at = p_at
      FROM (SELECT f.pid, max(f.off) AS last FROM unnest(f_pid, f_off) AS f (pid, off) GROUP BY f.pid) c
     WHERE p.id = c.pid AND p.id = ANY (p_ids);
END;
$function$;

CREATE OR REPLACE FUNCTION queenside.push(p_ids bigint[], p_starts integer[], p_counts integer[], p_slots integer[], p_hashes uuid[], p_leaders integer[], p_message_ids uuid[], p_transaction_ids text[], p_payloads bytea[], p_trace_ids text[], p_headers bytea[], OUT committed_at timestamp with time zone, OUT bases bigint[], OUT dedup_on boolean[], OUT dup_positions integer[], OUT dup_offsets bigint[], OUT dup_message_ids uuid[], OUT dup_committed_at timestamp with time zone[])
 RETURNS record
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET enable_bitmapscan TO 'off'
 SET jit TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
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
    -- every message is new. Only push writes dedup rows, and only under the
    -- row lock of their partition, which this call holds: what this probe
    -- does not find cannot appear before the commit, and a plain insert
    -- follows. Anything found, inside its window or not, takes the general
    -- path.
    IF p_leaders IS NULL AND NOT EXISTS (
           SELECT 1 FROM unnest(p_slots, p_hashes) AS u (s, h)
             JOIN queenside.dedup d ON uuid_hash_extended(d.hash, d.partition_id) = uuid_hash_extended(u.h, p_ids[u.s]) AND d.hash = u.h AND d.partition_id = p_ids[u.s]
            WHERE d.partition_id = ANY (p_ids)) THEN
        INSERT INTO queenside.dedup (partition_id, hash, msg_offset, message_id, committed_at)
        SELECT p_ids[u.s], u.h, bases[u.s] + (u.o - p_starts[u.s]), u.m, v_at
          FROM unnest(p_slots, p_hashes, p_message_ids) WITH ORDINALITY AS u (s, h, m, o);
        v_count := n;
    END IF;

    IF v_count = n THEN -- every message is new
        IF cardinality(p_ids) = 1 THEN -- the segment is the input as it is
            INSERT INTO queenside.segments (partition_id, last_offset, base_offset, committed_at,
                                            message_ids, transaction_ids, payloads, trace_ids, headers)
            VALUES (p_ids[1], bases[1] + n - 1, bases[1], v_at,
                    p_message_ids, p_transaction_ids, p_payloads, p_trace_ids, p_headers);
        ELSIF n = cardinality(p_ids) THEN -- one message per partition
            -- Elements, not slices: an array parameter is held expanded,
            -- so an element is read in place, while every slice would
            -- flatten the whole array first.
            INSERT INTO queenside.segments (partition_id, last_offset, base_offset, committed_at,
                                            message_ids, transaction_ids, payloads, trace_ids, headers)
            SELECT p_ids[k], bases[k], bases[k], v_at,
                   ARRAY[p_message_ids[k]], ARRAY[p_transaction_ids[k]], ARRAY[p_payloads[k]],
                   CASE WHEN p_trace_ids IS NOT NULL THEN ARRAY[p_trace_ids[k]] END,
                   CASE WHEN p_headers IS NOT NULL THEN ARRAY[p_headers[k]] END
              FROM generate_subscripts(p_ids, 1) AS k;
        ELSE -- each partition's segment is its run of the input
            INSERT INTO queenside.segments (partition_id, last_offset, base_offset, committed_at,
                                            message_ids, transaction_ids, payloads, trace_ids, headers)
            SELECT p_ids[k], bases[k] + p_counts[k] - 1, bases[k], v_at,
                   p_message_ids[p_starts[k] : p_starts[k] + p_counts[k] - 1],
                   p_transaction_ids[p_starts[k] : p_starts[k] + p_counts[k] - 1],
                   p_payloads[p_starts[k] : p_starts[k] + p_counts[k] - 1],
                   p_trace_ids[p_starts[k] : p_starts[k] + p_counts[k] - 1],
                   p_headers[p_starts[k] : p_starts[k] + p_counts[k] - 1]
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
        -- The messages stored already, with their originals: hashes that
        -- still name an offset below their partition's base.
        -- A join, not a LIMIT 1 lateral look-up, which Citus cannot plan
        -- beside a table function; one row a message all the same.
        SELECT array_agg(x.o ORDER BY x.o), array_agg(x.msg_offset ORDER BY x.o),
               array_agg(x.message_id ORDER BY x.o), array_agg(x.committed_at ORDER BY x.o)
          INTO dup_positions, dup_offsets, dup_message_ids, dup_committed_at
          FROM (SELECT DISTINCT ON (u.o) u.o, d.msg_offset, d.message_id, d.committed_at
                  FROM unnest(p_slots, p_hashes, coalesce(p_leaders, '{}')) WITH ORDINALITY AS u (s, h, l, o)
                  JOIN queenside.dedup d
                    ON uuid_hash_extended(d.hash, d.partition_id) = uuid_hash_extended(u.h, p_ids[u.s]) AND
                       d.partition_id = p_ids[u.s] AND d.hash = u.h AND d.msg_offset < bases[u.s]
                 WHERE d.partition_id = ANY (p_ids) AND coalesce(u.l, u.o) = u.o
                 ORDER BY u.o, d.msg_offset) x;
    END IF;

    -- Wake the pops waiting on these queues, on every sidecar. Delivered
    -- at commit; identical notifications of one transaction fold into one.
    PERFORM queenside.wake(w) FROM unnest(v_queues) AS w;
END;
$function$;
