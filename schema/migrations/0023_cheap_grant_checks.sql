-- queenside storage, version 23: the checks of versions 21 and 22 made
-- cheap.
--
-- may() looked up the role's grants by g.role = session_user. session_user
-- is of type name, whose collation is "C"; compared with the text column,
-- whose collation is the database's, the key could not use the primary
-- key's index. Inside pop_from, ack_call and push, which turn sequential
-- scans off, that left a sequential scan costed at the penalty for one,
-- far above jit_above_cost: every check compiled its query, 28 to 47 ms a
-- call for a role that is not the owner, measured in one backend on this
-- machine (1,000 calls in a loop under pop_from's settings). The
-- comparison is now in the column's collation, an index look-up, and
-- may() is PL/pgSQL, whose plans a session keeps: 0.02 ms a check.
--
-- is_owner() read pg_roles, a view over two catalogs, for rolsuper;
-- pg_has_role is true for a superuser whatever the role, so it alone
-- decides.

CREATE OR REPLACE FUNCTION queenside.is_owner() RETURNS boolean
 LANGUAGE sql STABLE
AS $function$
    SELECT coalesce((SELECT pg_has_role(session_user, n.nspowner, 'MEMBER')
                       FROM pg_catalog.pg_namespace n
                      WHERE n.nspname = 'queenside'), false)
$function$;

CREATE OR REPLACE FUNCTION queenside.may(p_queue text, p_right text, p_group text DEFAULT NULL) RETURNS boolean
 LANGUAGE plpgsql STABLE SECURITY DEFINER
 SET search_path = pg_catalog
AS $function$
BEGIN
    RETURN queenside.is_owner() OR EXISTS (
        SELECT 1 FROM queenside.queue_grants g
         WHERE g.role = session_user::text COLLATE "default"
           AND queenside.matches(g.queue, p_queue)
           AND p_right = ANY (g.rights)
           AND (p_right <> 'consume' OR p_group IS NULL OR g.groups IS NULL OR queenside.matches(g.groups, p_group)));
END;
$function$;
