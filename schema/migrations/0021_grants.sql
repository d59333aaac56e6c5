-- queenside storage, version 21: who may touch which queue.
--
-- The identity is the PostgreSQL role a session logs in as (session_user:
-- a SECURITY DEFINER function or SET ROLE does not change it). The role
-- that owns the schema, the one that migrates it, and superusers may do
-- everything, and alone may grant. Any other role may do on a queue what a
-- row here grants it: rights on queues named exactly, or by a prefix
-- ending in '*' ("billing.*"); consume may be limited to groups the same
-- way. The rights are:
--
--   produce  push, send*
--   consume  pop, ack, renew, release, seek of a group it consumes
--   read     stats, groups, the dead letters' list, messages and payloads
--   manage   configure, pause, seek any group, delete a group, replay and
--            delete dead letters, maintenance
--
-- may() is the one place a right is decided; refuse_unless() raises the
-- refusal every caller gives (SQLSTATE 42501, with the schema named, so
-- that the sidecar tells it from a table privilege PostgreSQL refused).
-- On Citus the table is a reference table, so that every node reads it
-- where it stands.

-- Every role may call the schema's functions, which decide what it may
-- do, and read which migrations are applied, which a sidecar checks at
-- start.
GRANT USAGE ON SCHEMA queenside TO PUBLIC;
GRANT SELECT ON queenside.schema_migrations TO PUBLIC;

CREATE TABLE queenside.queue_grants (
    role       text        NOT NULL,
    queue      text        NOT NULL,
    rights     text[]      NOT NULL,
    groups     text,
    granted_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT queue_grants_pkey PRIMARY KEY (role, queue),
    CONSTRAINT queue_grants_rights CHECK (cardinality(rights) > 0 AND rights <@ ARRAY['produce', 'consume', 'read', 'manage']),
    CONSTRAINT queue_grants_groups CHECK (groups IS NULL OR 'consume' = ANY (rights))
);

-- The grants, as an operator reads them.
CREATE VIEW queenside.grants AS
SELECT role, queue, rights, groups, granted_at FROM queenside.queue_grants;

-- is_owner tells whether the session's role may do everything: a
-- superuser, or a member of the role that owns the schema.
CREATE FUNCTION queenside.is_owner() RETURNS boolean
 LANGUAGE sql STABLE
AS $function$
    SELECT coalesce((SELECT r.rolsuper OR pg_has_role(session_user, n.nspowner, 'MEMBER')
                       FROM pg_catalog.pg_namespace n, pg_catalog.pg_roles r
                      WHERE n.nspname = 'queenside' AND r.rolname = session_user), false)
$function$;

-- matches tells whether a name matches a pattern: the same name, or, for
-- a pattern ending in '*', a name that starts with what precedes it.
CREATE FUNCTION queenside.matches(p_pattern text, p_name text) RETURNS boolean
 LANGUAGE sql IMMUTABLE
AS $function$
    SELECT CASE WHEN right(p_pattern, 1) = '*' THEN starts_with(p_name, left(p_pattern, -1))
                ELSE p_name = p_pattern END
$function$;

-- may tells whether the session's role may use p_right on p_queue (and,
-- for consume, p_group when given). One look-up of the role's grants by
-- its key.
CREATE FUNCTION queenside.may(p_queue text, p_right text, p_group text DEFAULT NULL) RETURNS boolean
 LANGUAGE sql STABLE SECURITY DEFINER
 SET search_path = pg_catalog
AS $function$
    SELECT queenside.is_owner() OR EXISTS (
        SELECT 1 FROM queenside.queue_grants g
         WHERE g.role = session_user
           AND queenside.matches(g.queue, p_queue)
           AND p_right = ANY (g.rights)
           AND (p_right <> 'consume' OR p_group IS NULL OR g.groups IS NULL OR queenside.matches(g.groups, p_group)))
$function$;

-- refuse_unless raises the refusal of p_right on p_queue unless the
-- session's role may use it. Besides the message, the error names the
-- right in its column field and the queue in its table field, for the
-- sidecar's metrics and log.
CREATE FUNCTION queenside.refuse_unless(p_queue text, p_right text, p_group text DEFAULT NULL) RETURNS void
 LANGUAGE plpgsql STABLE
AS $function$
BEGIN
    IF queenside.may(p_queue, p_right, p_group) THEN
        RETURN;
    END IF;
    RAISE EXCEPTION USING
        MESSAGE = format('%s may not %s %s%s: grant it with queenside grant --role %s --queue %s --rights %s',
                         session_user, p_right, p_queue,
                         CASE WHEN p_group IS NOT NULL AND p_right = 'consume' THEN format(' (group %s)', p_group) ELSE '' END,
                         session_user, p_queue, p_right),
        ERRCODE = '42501', SCHEMA = 'queenside', COLUMN = p_right, TABLE = p_queue;
END;
$function$;

-- refuse_unless_owner raises the refusal of what only the schema's owner
-- may do.
CREATE FUNCTION queenside.refuse_unless_owner(p_what text) RETURNS void
 LANGUAGE plpgsql STABLE
AS $function$
BEGIN
    IF NOT queenside.is_owner() THEN
        RAISE EXCEPTION '% may not %: only the owner of schema queenside (%) may', session_user, p_what,
            (SELECT nspowner::regrole::text FROM pg_catalog.pg_namespace WHERE nspname = 'queenside')
            USING ERRCODE = '42501', SCHEMA = 'queenside';
    END IF;
END;
$function$;

-- grant gives p_role the rights p_rights on the queues p_queue names, in
-- addition to what it has there; p_groups, given with consume, limits
-- consume to those groups. Only the schema's owner may grant.
CREATE FUNCTION queenside."grant"(p_role text, p_queue text, p_rights text[], p_groups text DEFAULT NULL) RETURNS void
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM queenside.refuse_unless_owner('grant');
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = p_role) THEN
        RAISE EXCEPTION 'grant: there is no role %', p_role USING ERRCODE = '22023';
    END IF;
    IF p_queue IS NULL OR p_queue = '' OR strpos(left(p_queue, -1), '*') > 0 THEN
        RAISE EXCEPTION 'grant: queue %: want a queue name, or a prefix ending in *', coalesce(p_queue, 'NULL') USING ERRCODE = '22023';
    END IF;
    IF p_groups IS NOT NULL AND (p_groups = '' OR strpos(left(p_groups, -1), '*') > 0) THEN
        RAISE EXCEPTION 'grant: groups %: want a group name, or a prefix ending in *', p_groups USING ERRCODE = '22023';
    END IF;
    IF cardinality(p_rights) IS NULL OR cardinality(p_rights) = 0 OR NOT p_rights <@ ARRAY['produce', 'consume', 'read', 'manage'] THEN
        RAISE EXCEPTION 'grant: rights %: want one or more of produce, consume, read, manage', coalesce(p_rights::text, 'NULL') USING ERRCODE = '22023';
    END IF;
    IF p_groups IS NOT NULL AND NOT 'consume' = ANY (p_rights) THEN
        RAISE EXCEPTION 'grant: groups limit consume, which the rights % do not give', p_rights USING ERRCODE = '22023';
    END IF;
    INSERT INTO queenside.queue_grants AS g (role, queue, rights, groups)
    VALUES (p_role, p_queue, ARRAY(SELECT DISTINCT r FROM unnest(p_rights) r ORDER BY r), p_groups)
    ON CONFLICT (role, queue) DO UPDATE
    SET rights = ARRAY(SELECT DISTINCT r FROM unnest(g.rights || excluded.rights) r ORDER BY r),
        groups = CASE WHEN 'consume' = ANY (p_rights) THEN p_groups ELSE g.groups END,
        granted_at = now();
END;
$function$;

-- revoke takes the rights p_rights (all of them when NULL) on the queues
-- p_queue names, exactly as granted, from p_role. It returns whether the
-- role had any of them. Only the schema's owner may revoke.
CREATE FUNCTION queenside.revoke(p_role text, p_queue text, p_rights text[] DEFAULT NULL) RETURNS boolean
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_had text[];
BEGIN
    PERFORM queenside.refuse_unless_owner('revoke');
    IF p_rights IS NOT NULL AND NOT p_rights <@ ARRAY['produce', 'consume', 'read', 'manage'] THEN
        RAISE EXCEPTION 'revoke: rights %: want produce, consume, read or manage', p_rights USING ERRCODE = '22023';
    END IF;
    SELECT rights INTO v_had FROM queenside.queue_grants WHERE role = p_role AND queue = p_queue FOR UPDATE;
    IF v_had IS NULL OR p_rights IS NOT NULL AND NOT v_had && p_rights THEN
        RETURN false;
    END IF;
    IF p_rights IS NULL OR v_had <@ p_rights THEN
        DELETE FROM queenside.queue_grants WHERE role = p_role AND queue = p_queue;
    ELSE
        UPDATE queenside.queue_grants
           SET rights = ARRAY(SELECT r FROM unnest(v_had) r WHERE r <> ALL (p_rights) ORDER BY r),
               groups = CASE WHEN 'consume' = ANY (p_rights) THEN NULL ELSE groups END
         WHERE role = p_role AND queue = p_queue;
    END IF;
    RETURN true;
END;
$function$;

-- push and ensure_partitions as version 19 left them, with the check of
-- produce. The other rights are recorded, not yet checked: for the other
-- calls a role that is not the owner needs privileges on the tables.
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
        -- Creating a queue's partitions (and the queue) is producing to
        -- it (version 21).
        IF NOT queenside.is_owner() THEN
            PERFORM queenside.refuse_unless(p_queue, 'produce');
        END IF;
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
    -- The restrictions by p_ids are for Citus's pruning alone (see
    -- version 19).
    WITH moved AS (
        UPDATE queenside.partitions p
           SET next_offset = p.next_offset + c.n,
               last_committed_at = greatest(v_clock, p.last_committed_at)
          FROM unnest(p_ids, p_counts) AS c (id, n)
         WHERE p.id = c.id AND (NOT queenside.distributed() OR p.id = ANY (p_ids))
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
    -- A role that is not the schema's owner stores only in the queues it
    -- may produce to (version 21); the refusal aborts the call whole.
    IF NOT queenside.is_owner() THEN
        PERFORM queenside.refuse_unless(w, 'produce') FROM unnest(v_queues) AS w;
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
            WHERE NOT queenside.distributed() OR d.partition_id = ANY (p_ids)
           UNION ALL
           SELECT 1 FROM unnest(p_slots, p_hashes) AS u (s, h)
             JOIN queenside.segments g ON g.partition_id = p_ids[u.s] AND g.hash = u.h
            WHERE NOT queenside.distributed() OR g.partition_id = ANY (p_ids)) THEN
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
         WHERE p.id = b.id AND (NOT queenside.distributed() OR p.id = ANY (p_ids));
        PERFORM queenside.push_general(v_at, p_ids, bases, p_slots, p_hashes, p_leaders,
                                       p_message_ids, p_transaction_ids, p_payloads, p_trace_ids, p_headers);
        UPDATE queenside.cursors cu SET head_at = v_at
          FROM unnest(p_ids, bases) AS b (id, base)
          JOIN queenside.partitions p ON p.id = b.id
         WHERE p.next_offset > b.base AND (NOT queenside.distributed() OR (p.id = ANY (p_ids) AND cu.partition_id = ANY (p_ids)))
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
                         WHERE (NOT queenside.distributed() OR d.partition_id = ANY (p_ids)) AND coalesce(u.l, u.o) = u.o
                        UNION ALL
                        SELECT u.o, g.last_offset, g.message_ids[1], g.committed_at, bases[u.s]
                          FROM unnest(p_slots, p_hashes, coalesce(p_leaders, '{}')) WITH ORDINALITY AS u (s, h, l, o)
                          JOIN queenside.segments g ON g.partition_id = p_ids[u.s] AND g.hash = u.h
                         WHERE (NOT queenside.distributed() OR g.partition_id = ANY (p_ids)) AND coalesce(u.l, u.o) = u.o) k
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
$function$;
