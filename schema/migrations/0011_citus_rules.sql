-- queenside storage, version 11: the schema made fit for Citus.
--
-- On Citus, with the per-partition tables distributed by partition id (see
-- SCALING.md), a key must hold the distribution column and a statement must
-- keep the rules of SCALING.md, section 4, which schema/citusrules checks
-- over schema/current.sql. This migration mends what can be mended without
-- changing what a call does on one PostgreSQL. The hot calls gain a first
-- argument, p_route, by which Citus sends a call whole to the worker of its
-- partitions' shard (push, pop_from, ack_call; NULL on one PostgreSQL): their
-- signatures of version 10 stay, as calls of the new ones, so that sidecars
-- of version 10 go on calling them while pods are upgraded.
--
-- Keys:
--   - partitions' names were unique per queue: they move to partition_names
--     (queue_id, name, id), to be a reference table, which ensure_partitions
--     writes first (two creators of one name meet on its key, under the
--     queue row's share lock as before) and reads names in. partitions
--     keeps its name (pop returns it) under a plain index, for listings and
--     for sidecars of version 10, which look a partition up by name there.
--     Its id is no identity any more but taken from the sequence
--     partition_ids, so the id is known before the partition row is written;
--   - dead_letters, keyed by id alone, is keyed (partition_id, id), with a
--     plain index on id for the look-ups by id.
-- On an existing database this writes a partition_names row for every
-- partition and builds three indexes; dead letters are only re-indexed.
--
-- Statements:
--   - every statement of push and ack_call on a distributed table also says
--     partition id = ANY (its partitions) (R1, R2): a join with unnest
--     prunes nothing. The rows are still locked in id order, through the
--     primary key;
--   - push_general, one SQL-language statement of four modifying CTEs
--     (R7, R9), is PL/pgSQL: which messages a stored hash holds back is read
--     by one join of the call's hashes with dedup, as push probes them, the
--     rest worked out from arrays (a query correlating dedup with the call's
--     input cannot be planned on Citus), then one statement a step, in the
--     order the CTEs' effects had. push finds the originals of duplicates by
--     a join, not a LIMIT 1 lateral look-up beside a table function;
--   - ack_call's head of a cursor left at the end of its partition is
--     now() read once into a variable, where it was now() inside a CASE
--     (R5): the transaction's start either way;
--   - ack, shed_undelivered and pop work out a cursor's head by an
--     assignment before their UPDATE, where they called cursor_head, a
--     volatile function that reads segments, inside it (R3, R6); ensure_group
--     positions a new group's cursors so, partition by partition, and adds
--     them by one INSERT;
--   - position_cursors positions a started subscription's cursors for both
--     pop and pop_many, which each wrote the same UPDATE out: partition by
--     partition in id order, a cursor updated only while it is still
--     unpositioned, so one another pop positioned and moved meanwhile is
--     not set back;
--   - seek moves a group's cursors partition by partition in id order, each
--     by a statement on its partition with its position and head worked
--     out before it, where it locked every cursor of the group by one
--     statement (R2, R3, R6, R9); still one transaction;
--   - consumed_to is PL/pgSQL (R7), and head_at, which nothing has called
--     since version 5, is dropped;
--   - pop_from is pop_many given the partitions to choose among (p_pids),
--     NULL for any of the group's: on Citus no lock may span shards (R2),
--     and the sidecar has it choose among one shard's partitions, found
--     ready by ready_partitions, an unlocked look across shards. Heads of
--     cursors it moves are worked out by assignments before the statements
--     that move them (R3, R6), and each relation of those statements is
--     restricted to the partitions taken (R1). pop_many stays, for sidecars
--     of version 10, as a call of pop_from;
--   - pop and pop_from position a started subscription's cursors when a
--     partition named has one unpositioned, where any of the group's did;
--   - expire_segments asks whether every group consumed a partition's
--     first segment of that partition alone, by an assignment (R6), and
--     deletes segments and saves their hashes one statement at a time (R9);
--     purge_orphan_hashes reads due rows without a window over every shard
--     and deletes or postpones each by statements on its partition (R1, R9).

CREATE TABLE queenside.partition_names (
    queue_id bigint NOT NULL REFERENCES queenside.queues (id) ON DELETE CASCADE,
    name     text   NOT NULL,
    id       bigint NOT NULL,
    PRIMARY KEY (queue_id, name),
    UNIQUE (id)
);
INSERT INTO queenside.partition_names (queue_id, name, id)
SELECT queue_id, name, id FROM queenside.partitions;

CREATE SEQUENCE queenside.partition_ids AS bigint;
SELECT setval('queenside.partition_ids', coalesce((SELECT max(id) FROM queenside.partitions), 0) + 1, false);
ALTER TABLE queenside.partitions ALTER COLUMN id DROP IDENTITY;
ALTER TABLE queenside.partitions DROP CONSTRAINT partitions_queue_id_name_key;
CREATE INDEX partitions_queue_name ON queenside.partitions (queue_id, name);

ALTER TABLE queenside.dead_letters DROP CONSTRAINT dead_letters_pkey;
ALTER TABLE queenside.dead_letters ADD PRIMARY KEY (partition_id, id);
CREATE INDEX dead_letters_id ON queenside.dead_letters (id);

DROP FUNCTION queenside.head_at(bigint, bigint);

CREATE OR REPLACE FUNCTION queenside.consumed_to(p_partition bigint, p_queue bigint)
 RETURNS bigint
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    RETURN (SELECT coalesce(min(coalesce(cu.committed, 0)), 0)
              FROM queenside.groups g
              LEFT JOIN queenside.cursors cu ON cu.group_id = g.id AND cu.partition_id = p_partition
             WHERE g.queue_id = p_queue);
END;
$function$;

CREATE OR REPLACE FUNCTION queenside.ensure_partitions(p_queue text, p_names text[])
 RETURNS TABLE(o_name text, o_id bigint)
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET enable_bitmapscan TO 'off'
 SET jit TO 'off'
AS $function$
DECLARE
    v_queue   bigint;
    v_ids     bigint[]; -- p_names' ids, NULL for a partition that is missing
    v_missing text[];
    v_new_ids bigint[] := '{}';
    v_new     text[] := '{}';
    v_now     timestamptz;
    v_added   bigint;
    r         record;
BEGIN
    SELECT q.id INTO v_queue FROM queenside.queues q WHERE q.name = p_queue;
    v_ids := ARRAY(
        SELECT (SELECT n.id FROM queenside.partition_names n WHERE n.queue_id = v_queue AND n.name = u.n)
          FROM unnest(p_names) WITH ORDINALITY AS u (n, o)
         ORDER BY u.o);
    IF array_position(v_ids, NULL) IS NOT NULL THEN
        -- In name order, so that two creators of the same partitions wait
        -- for each other in one direction only.
        v_missing := ARRAY(SELECT u.n FROM unnest(p_names, v_ids) AS u (n, id) WHERE u.id IS NULL ORDER BY u.n);
        INSERT INTO queenside.queues (name) VALUES (p_queue) ON CONFLICT DO NOTHING;
        -- A share lock: creators of partitions run side by side, and wait
        -- only for a group being created (ensure_group locks the row for
        -- update), whose cursors their statements below then see, as the
        -- group sees their partitions once they commit.
        SELECT q.id INTO v_queue FROM queenside.queues q WHERE q.name = p_queue FOR SHARE;
        -- A new partition is empty: a group whose subscription has started
        -- reads it from offset 0; one that starts later is positioned then.
        -- The names first: a creator of the same name waits here for this
        -- one and then finds it taken, with its partition beside it.
        FOR r IN
            INSERT INTO queenside.partition_names (queue_id, name, id)
            SELECT v_queue, n, nextval('queenside.partition_ids') FROM unnest(v_missing) n ORDER BY n
            ON CONFLICT (queue_id, name) DO NOTHING
            RETURNING queenside.partition_names.id, queenside.partition_names.name
        LOOP
            v_new_ids := v_new_ids || r.id;
            v_new := v_new || r.name;
        END LOOP;
        INSERT INTO queenside.partitions (id, queue_id, name)
        SELECT u.id, v_queue, u.n FROM unnest(v_new_ids, v_new) AS u (id, n);
        v_now := clock_timestamp();
        INSERT INTO queenside.cursors (group_id, partition_id, committed)
        SELECT g.id, u.id, CASE WHEN g.start_at IS NULL OR g.start_at <= v_now THEN 0 END
          FROM unnest(v_new_ids) AS u (id), queenside.groups g
         WHERE g.queue_id = v_queue;
        GET DIAGNOSTICS v_added = ROW_COUNT;
        IF v_added > 0 AND v_added * 2 > (SELECT greatest(c.reltuples, 0) FROM pg_class c
                                           WHERE c.oid = 'queenside.cursors'::regclass) THEN
            ANALYZE queenside.cursors;
        END IF;
        -- The missing ones again: created here, or by a creator this call
        -- waited for.
        v_ids := ARRAY(
            SELECT coalesce(u.id, (SELECT n.id FROM queenside.partition_names n WHERE n.queue_id = v_queue AND n.name = u.n))
              FROM unnest(p_names, v_ids) WITH ORDINALITY AS u (n, id, o)
             ORDER BY u.o);
    END IF;
    RETURN QUERY SELECT u.n, u.id FROM unnest(p_names, v_ids) AS u (n, id);
END;
$function$;

CREATE OR REPLACE FUNCTION queenside.ensure_group(p_queue text, p_group text, p_mode text, p_from timestamp with time zone, OUT o_group bigint, OUT o_queue bigint)
 RETURNS record
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_start timestamptz;
    v_pids  bigint[] := '{}';
    v_curs  bigint[] := '{}';
    v_heads timestamptz[] := '{}';
    v_cur   bigint;
    v_pid   bigint;
BEGIN
    SELECT g.id, g.queue_id INTO o_group, o_queue
      FROM queenside.groups g
      JOIN queenside.queues q ON q.id = g.queue_id
     WHERE q.name = p_queue AND g.name = p_group;
    IF FOUND THEN
        RETURN;
    END IF;
    INSERT INTO queenside.queues (name) VALUES (p_queue) ON CONFLICT (name) DO NOTHING;
    SELECT q.id INTO o_queue FROM queenside.queues q WHERE q.name = p_queue FOR UPDATE;
    v_start := CASE p_mode WHEN 'new' THEN clock_timestamp() WHEN 'from' THEN p_from END;
    INSERT INTO queenside.groups (queue_id, name, subscription_mode, start_at)
    VALUES (o_queue, p_group, p_mode, v_start)
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
    -- A call routed to its shard (p_route, on Citus) may run on a worker,
    -- where no sidecar listens: its caller wakes them, on the coordinator,
    -- once the call committed.
    IF p_route IS NULL THEN
        PERFORM queenside.wake(w) FROM unnest(v_queues) AS w;
    END IF;
END;
$function$;

-- push as version 10 calls it, for its sidecars while pods are upgraded
-- (the upgrade rule, schema/migrate.go).
CREATE OR REPLACE FUNCTION queenside.push(p_ids bigint[], p_starts integer[], p_counts integer[], p_slots integer[], p_hashes uuid[], p_leaders integer[], p_message_ids uuid[], p_transaction_ids text[], p_payloads bytea[], p_trace_ids text[], p_headers bytea[], OUT committed_at timestamp with time zone, OUT bases bigint[], OUT dedup_on boolean[], OUT dup_positions integer[], OUT dup_offsets bigint[], OUT dup_message_ids uuid[], OUT dup_committed_at timestamp with time zone[])
 RETURNS record
 LANGUAGE plpgsql
AS $function$
BEGIN
    SELECT * INTO committed_at, bases, dedup_on, dup_positions, dup_offsets, dup_message_ids, dup_committed_at
      FROM queenside.push(NULL::bigint, p_ids, p_starts, p_counts, p_slots, p_hashes, p_leaders, p_message_ids,
                          p_transaction_ids, p_payloads, p_trace_ids, p_headers);
END;
$function$;

-- ack gains p_wake: a call routed to a worker (ack_call's p_route) leaves
-- the wake-up of a rewind to its caller, on the coordinator.
DROP FUNCTION queenside.ack(bigint, bigint, uuid, bigint[], uuid[], boolean[], text[]);
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
    IF NOT FOUND OR c.lease_id IS DISTINCT FROM p_lease OR c.lease_expires_at <= now() THEN
        RETURN QUERY SELECT g.i, false, 'lease_expired', false, false, c.committed FROM generate_series(1, n) g (i);
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
                             ARRAY(SELECT p_errors[i] FROM unnest(v_items) WITH ORDINALITY AS x (i, o) ORDER BY x.o),
                             p_route IS NULL) a;
    END LOOP;
END;
$function$;

-- ack_call as version 10 calls it, for its sidecars while pods are
-- upgraded (the upgrade rule, schema/migrate.go).
CREATE OR REPLACE FUNCTION queenside.ack_call(p_groups bigint[], p_partitions bigint[], p_leases uuid[], p_slots integer[], p_offsets bigint[], p_hashes uuid[], p_failed boolean[], p_errors text[])
 RETURNS TABLE(idx integer, success boolean, code text, dead_lettered boolean, released boolean, cursor_offset bigint)
 LANGUAGE plpgsql
AS $function$
BEGIN
    RETURN QUERY SELECT * FROM queenside.ack_call(NULL::bigint, p_groups, p_partitions, p_leases, p_slots, p_offsets,
                                                  p_hashes, p_failed, p_errors);
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
                                        error, failures, committed_at)
    SELECT q.id, p.id, g.id, q.name, p.name, g.name, p_offset,
           s.message_ids[p_offset - s.base_offset + 1], s.transaction_ids[p_offset - s.base_offset + 1],
           s.payloads[p_offset - s.base_offset + 1], s.trace_ids[p_offset - s.base_offset + 1],
           s.headers[p_offset - s.base_offset + 1],
           format('delivered %s times under a lease without being acked (maxDeliveries %s)',
                  cardinality(cu.delivered_to), p_max),
           coalesce(cu.fail_counts[array_position(cu.fail_offsets, p_offset)], 0), s.committed_at
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

CREATE OR REPLACE FUNCTION queenside.position_cursors(p_group bigint, p_start_at timestamp with time zone)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_pid  bigint;
    v_cur  bigint;
    v_head timestamptz;
BEGIN
    -- Partition by partition, in id order, as acks lock cursors; a cursor
    -- positioned meanwhile by another pop is left as that pop left it.
    FOR v_pid IN SELECT cu.partition_id FROM queenside.cursors cu
                  WHERE cu.group_id = p_group AND cu.committed IS NULL
                  ORDER BY cu.partition_id LOOP
        v_cur := queenside.first_offset_at(v_pid, p_start_at);
        v_head := queenside.cursor_head(v_pid, v_cur);
        UPDATE queenside.cursors cu SET committed = v_cur, head_at = v_head
         WHERE cu.group_id = p_group AND cu.partition_id = v_pid AND cu.committed IS NULL;
    END LOOP;
END;
$function$;

-- The partitions a group may be served from now, oldest first, as pop_from
-- chooses among them but without locking any: on Citus, where no lock may
-- span shards, the sidecar looks here, then has pop_from choose among one
-- shard's (SCALING.md, section 2). A subscription that started since is
-- positioned first, as pop_from does.
CREATE OR REPLACE FUNCTION queenside.ready_partitions(p_group bigint, p_limit integer)
 RETURNS TABLE(partition_id bigint)
 LANGUAGE plpgsql
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
         WHERE cu.partition_id = a.pid AND cu.group_id = p_group AND cu.partition_id = ANY (c_pid)
           AND (SELECT s.base_offset FROM queenside.segments s
                 WHERE s.partition_id = a.pid AND s.partition_id = ANY (c_pid) AND s.last_offset >= a.cur
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
                              WHERE e.partition_id = a.pid AND e.partition_id = ANY (c_pid) AND e.last_offset >= a.hi
                              ORDER BY e.last_offset LIMIT 1) END AS stop) e
     CROSS JOIN LATERAL (SELECT s.* FROM queenside.segments s
                          WHERE s.partition_id = a.pid AND s.partition_id = ANY (c_pid)
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
             WHERE cu.partition_id = a.pid AND cu.group_id = p_group AND cu.partition_id = ANY (c_pid)
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
                                  WHERE e.partition_id = a.pid AND e.partition_id = ANY (c_pid)
                                    AND e.last_offset >= a.hi
                                  ORDER BY e.last_offset LIMIT 1) END AS stop) e
         CROSS JOIN LATERAL (SELECT s.* FROM queenside.segments s
                              WHERE s.partition_id = a.pid AND s.partition_id = ANY (c_pid)
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

-- pop_many as version 10 calls it, for its sidecars while pods are
-- upgraded (the upgrade rule, schema/migrate.go): pop_from, of the named
-- partition or of any.
CREATE OR REPLACE FUNCTION queenside.pop_many(p_group bigint, p_partition bigint, p_partitions integer[], p_batches integer[], p_lease_seconds integer, p_auto_ack boolean)
 RETURNS TABLE(request integer, serve_order integer, partition_id bigint, partition_name text, lease_id uuid, lease_from bigint, lease_to bigint, lease_expires_at timestamp with time zone, head_attempts integer, seen_to bigint, first_offset bigint, committed_at timestamp with time zone, message_ids uuid[], transaction_ids text[], payloads bytea[], trace_ids text[], headers bytea[])
 LANGUAGE plpgsql
AS $function$
BEGIN
    RETURN QUERY SELECT * FROM queenside.pop_from(NULL::bigint, p_group, CASE WHEN p_partition IS NOT NULL THEN ARRAY[p_partition] END,
                                                  p_partitions, p_batches, p_lease_seconds, p_auto_ack);
END;
$function$;

CREATE OR REPLACE FUNCTION queenside.seek(p_group bigint, p_partition bigint, p_to text, p_at timestamp with time zone)
 RETURNS TABLE(partition_name text, cursor_offset bigint)
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_pid   bigint;
    v_name  text;
    v_next  bigint;
    v_pos   bigint;
    v_head  timestamptz;
    v_names text[] := '{}';
    v_posns bigint[] := '{}';
BEGIN
    IF p_to NOT IN ('beginning', 'end', 'time') THEN
        RAISE EXCEPTION 'seek to %: want beginning, end or time', p_to USING ERRCODE = '22023';
    END IF;
    -- A caller's cached group id may name a group deleted since: it looks
    -- the group up again on no_data_found.
    PERFORM 1 FROM queenside.groups g WHERE g.id = p_group;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'group % does not exist', p_group USING ERRCODE = 'P0002';
    END IF;
    -- Partition by partition, in id order (the order acks lock cursors in),
    -- each cursor moved and its lease ended by a statement on its partition
    -- alone, the position and head worked out before it: on Citus no lock
    -- may span shards (R2, R3, R6). It is one transaction all the same.
    FOR v_pid IN SELECT cu.partition_id FROM queenside.cursors cu
                  WHERE cu.group_id = p_group AND (p_partition IS NULL OR cu.partition_id = p_partition)
                  ORDER BY cu.partition_id LOOP
        SELECT p.name, p.next_offset INTO v_name, v_next FROM queenside.partitions p WHERE p.id = v_pid;
        v_pos := CASE p_to WHEN 'end' THEN v_next
                           WHEN 'beginning' THEN queenside.first_offset_at(v_pid, NULL)
                           ELSE queenside.first_offset_at(v_pid, p_at) END;
        v_head := queenside.cursor_head(v_pid, v_pos);
        UPDATE queenside.cursors cu
           SET committed = v_pos, head_at = v_head,
               lease_id = NULL, lease_from = NULL, lease_to = NULL, lease_expires_at = NULL, lease_done = NULL,
               delivered_to = '{}', fail_offsets = '{}', fail_counts = '{}'
         WHERE cu.group_id = p_group AND cu.partition_id = v_pid;
        v_names := v_names || v_name;
        v_posns := v_posns || v_pos;
    END LOOP;
    RETURN QUERY SELECT u.n, u.o FROM unnest(v_names, v_posns) AS u (n, o) ORDER BY u.n;
    -- Pops waiting on the queue look again: a cursor moved back has work.
    PERFORM queenside.wake(q.name) FROM queenside.groups g JOIN queenside.queues q ON q.id = g.queue_id
     WHERE g.id = p_group;
END;
$function$;

-- The janitor's calls, each statement on one partition: the partitions due
-- are found by a read across every partition, as before, but whether every
-- group consumed a partition's first segment is asked of that partition
-- alone, by an assignment (R6), and the segments a call deletes are
-- deleted, their hashes saved, one statement at a time (R9).
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
        -- A segment whose hashes the dedup purge has not reached yet
        -- leaves them behind, to be deleted once they are due.
        FOR g IN
            DELETE FROM queenside.segments s
             WHERE s.partition_id = w.id AND s.last_offset < v_bound
            RETURNING s.last_offset, s.base_offset, s.committed_at,
                      CASE WHEN s.last_offset >= w.purged_to THEN s.transaction_ids END AS txids
        LOOP
            segments := segments + 1;
            messages := messages + (g.last_offset - g.base_offset + 1);
            CONTINUE WHEN g.txids IS NULL;
            v_hashes := ARRAY(SELECT DISTINCT queenside.transaction_hash(t) FROM unnest(g.txids) t);
            INSERT INTO queenside.orphan_hashes (purge_after, partition_id, last_offset, committed_at, hashes)
            VALUES (g.committed_at + w.keep, w.id, g.last_offset, g.committed_at, v_hashes);
            orphaned := orphaned + 1;
        END LOOP;
        IF v_bound < v_due THEN -- the budget cut this partition short
            next_from := w.id;
            RETURN;
        END IF;
    END LOOP;
END;
$function$;

-- Due rows in purge_after order, as before, read across partitions
-- without a window (a running sum over every shard is worked on the
-- coordinator, on Citus), each then deleted or postponed by statements on
-- its partition alone (R1, R9).
CREATE OR REPLACE FUNCTION queenside.purge_orphan_hashes(p_max_rows integer, p_max_hashes integer, OUT segments integer, OUT hashes bigint, OUT more boolean)
 RETURNS record
 LANGUAGE plpgsql
 SET enable_hashjoin TO 'off'
 SET enable_mergejoin TO 'off'
 SET enable_seqscan TO 'off'
 SET enable_bitmapscan TO 'off'
AS $function$
DECLARE
    v_now    timestamptz := now();
    r        record;
    v_seen   bigint := 0; -- hashes of the rows taken so far
    v_pid    bigint;
    v_cutoff timestamptz;
    v_n      bigint;
BEGIN
    segments := 0; hashes := 0;
    FOR r IN
        SELECT o.purge_after, o.partition_id, o.last_offset, o.committed_at, o.hashes
          FROM queenside.orphan_hashes o
         WHERE o.purge_after < v_now
         ORDER BY o.purge_after, o.partition_id, o.last_offset
         LIMIT p_max_rows
    LOOP
        EXIT WHEN v_seen >= p_max_hashes;
        v_seen := v_seen + cardinality(r.hashes);
        IF r.partition_id IS DISTINCT FROM v_pid THEN
            -- A partition that is gone (its queue deleted) keeps nothing.
            v_pid := r.partition_id;
            v_cutoff := coalesce(
                (SELECT v_now - queenside.dedup_keep(q.dedup_window_seconds, q.completed_retention_seconds)
                   FROM queenside.partitions p JOIN queenside.queues q ON q.id = p.queue_id
                  WHERE p.id = v_pid),
                'infinity');
        END IF;
        IF r.committed_at < v_cutoff THEN
            -- The keys are worked out first (OFFSET 0 keeps the subquery
            -- whole), so that each is one look-up of dedup_key.
            DELETE FROM queenside.dedup d
             USING (SELECT h, uuid_hash_extended(h, v_pid) AS k FROM unnest(r.hashes) h OFFSET 0) x
             WHERE uuid_hash_extended(d.hash, d.partition_id) = x.k AND
                   d.partition_id = v_pid AND d.hash = x.h AND d.committed_at < v_cutoff;
            GET DIAGNOSTICS v_n = ROW_COUNT;
            hashes := hashes + v_n;
            DELETE FROM queenside.orphan_hashes d
             WHERE d.partition_id = v_pid AND d.purge_after = r.purge_after AND d.last_offset = r.last_offset;
        ELSE
            -- The queue keeps its hashes longer than when the segment went.
            UPDATE queenside.orphan_hashes d SET purge_after = r.committed_at + (v_now - v_cutoff)
             WHERE d.partition_id = v_pid AND d.purge_after = r.purge_after AND d.last_offset = r.last_offset;
        END IF;
        segments := segments + 1;
    END LOOP;
    more := EXISTS (SELECT 1 FROM queenside.orphan_hashes o WHERE o.purge_after < v_now);
END;
$function$;
