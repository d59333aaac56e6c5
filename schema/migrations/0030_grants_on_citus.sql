-- queenside storage, version 30: grant, revoke and the layout of shards on Citus.
--
-- queue_grants is a reference table on Citus, where a statement that
-- writes one may hold no subquery: grant (version 21) computed the merged
-- rights in its INSERT ... ON CONFLICT, and revoke the rights left in its
-- UPDATE, and Citus refused both ("subqueries are not supported within
-- INSERT queries"). Each now computes them first, in a variable. grant
-- locks the role's grant on the pattern and adds to it, or inserts a new
-- one; an insert that meets one made meanwhile goes round again and adds
-- to that.

CREATE OR REPLACE FUNCTION queenside."grant"(p_role text, p_queue text, p_rights text[], p_groups text DEFAULT NULL::text)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_had    text[];
    v_groups text;
    v_rights text[];
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
    -- The role's grant on the pattern, locked, gains the rights; or a new
    -- one is made. A grant made meanwhile by another call is found on the
    -- next turn.
    LOOP
        SELECT g.rights, g.groups INTO v_had, v_groups
          FROM queenside.queue_grants g WHERE g.role = p_role AND g.queue = p_queue FOR UPDATE;
        IF FOUND THEN
            v_rights := ARRAY(SELECT DISTINCT r FROM unnest(v_had || p_rights) r ORDER BY r);
            UPDATE queenside.queue_grants
               SET rights = v_rights,
                   groups = CASE WHEN 'consume' = ANY (p_rights) THEN p_groups ELSE v_groups END,
                   granted_at = now()
             WHERE role = p_role AND queue = p_queue;
            RETURN;
        END IF;
        v_rights := ARRAY(SELECT DISTINCT r FROM unnest(p_rights) r ORDER BY r);
        INSERT INTO queenside.queue_grants (role, queue, rights, groups)
        VALUES (p_role, p_queue, v_rights, p_groups)
        ON CONFLICT (role, queue) DO NOTHING;
        IF FOUND THEN
            RETURN;
        END IF;
    END LOOP;
END;
$function$;

CREATE OR REPLACE FUNCTION queenside.revoke(p_role text, p_queue text, p_rights text[] DEFAULT NULL::text[])
 RETURNS boolean
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
        v_had := ARRAY(SELECT r FROM unnest(v_had) r WHERE r <> ALL (p_rights) ORDER BY r);
        UPDATE queenside.queue_grants
           SET rights = v_had,
               groups = CASE WHEN 'consume' = ANY (p_rights) THEN NULL ELSE groups END
         WHERE role = p_role AND queue = p_queue;
    END IF;
    RETURN true;
END;
$function$;

-- shards_of gives, on Citus, the shard of each partition of p_ids and the
-- workers that hold it ("host:port", comma-separated), which the sidecar
-- keeps to tell which calls span shards: what Citus' catalog says about
-- the layout, which every role may know. (The shard of a partition is
-- asked of the partitions table, which no role but the owner may read.)
CREATE FUNCTION queenside.shards_of(p_ids bigint[])
 RETURNS TABLE(o_id bigint, o_shard bigint, o_workers text)
 LANGUAGE plpgsql STABLE SECURITY DEFINER
 SET search_path = pg_catalog, pg_temp
AS $function$
BEGIN
    RETURN QUERY
    SELECT u.id, s.shard,
           coalesce((SELECT string_agg(p.nodename || ':' || p.nodeport, ',' ORDER BY p.nodename, p.nodeport)
                       FROM pg_catalog.pg_dist_shard_placement p WHERE p.shardid = s.shard), '')
      FROM unnest(p_ids) AS u (id),
           LATERAL (SELECT pg_catalog.get_shard_id_for_distribution_column('queenside.partitions', u.id) AS shard) AS s;
END;
$function$;

-- refuse_unless says the right and the queue in its detail too
-- ("queenside: right=consume queue=orders"): on Citus a refusal raised on
-- the worker a call was routed to reaches the client with its message,
-- detail and hint, but without the schema, column and table fields.
CREATE OR REPLACE FUNCTION queenside.refuse_unless(p_queue text, p_right text, p_group text DEFAULT NULL) RETURNS void
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
        DETAIL = format('queenside: right=%s queue=%s', p_right, p_queue),
        ERRCODE = '42501', SCHEMA = 'queenside', COLUMN = p_right, TABLE = p_queue;
END;
$function$;
