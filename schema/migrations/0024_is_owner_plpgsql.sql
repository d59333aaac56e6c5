-- queenside storage, version 24: the checks of a role that is not the
-- owner without planning at every call.
--
-- The checks of versions 21 to 23 ask is_owner() in PL/pgSQL conditions
-- (IF NOT queenside.is_owner()), where a SQL function is not inlined: each
-- call ran it through the SQL function executor, which plans its query
-- again every time. And may(), SECURITY DEFINER with its own search_path,
-- called is_owner() too: a plan a session keeps is made again when it runs
-- under another search_path than the one it was made under, so the
-- calls from inside may() and from outside it replanned each other's.
-- pg_stat_user_functions over a popack run of the bench (400,000
-- messages, pops of 100) gave 74 µs a call of is_owner() as the owner, and
-- 50 µs as an application role, which asks it twice a check.
--
-- is_owner() is now PL/pgSQL, whose plan a session keeps, and is asked
-- only under the caller's search_path: may() is an ordinary function, and
-- only granted(), the look-up of the role's grants in the table no other
-- role may read, runs as the owner, under its own search_path.

CREATE OR REPLACE FUNCTION queenside.is_owner() RETURNS boolean
 LANGUAGE plpgsql STABLE
AS $function$
BEGIN
    RETURN coalesce((SELECT pg_has_role(session_user, n.nspowner, 'MEMBER')
                       FROM pg_catalog.pg_namespace n
                      WHERE n.nspname = 'queenside'), false);
END;
$function$;

-- granted tells whether a grant of the session's role allows p_right on
-- p_queue (and, for consume, p_group when given); the owner's rights are
-- may()'s to add.
CREATE FUNCTION queenside.granted(p_queue text, p_right text, p_group text) RETURNS boolean
 LANGUAGE plpgsql STABLE SECURITY DEFINER
 SET search_path = pg_catalog
AS $function$
BEGIN
    RETURN EXISTS (
        SELECT 1 FROM queenside.queue_grants g
         WHERE g.role = session_user::text COLLATE "default"
           AND queenside.matches(g.queue, p_queue)
           AND p_right = ANY (g.rights)
           AND (p_right <> 'consume' OR p_group IS NULL OR g.groups IS NULL OR queenside.matches(g.groups, p_group)));
END;
$function$;

CREATE OR REPLACE FUNCTION queenside.may(p_queue text, p_right text, p_group text DEFAULT NULL) RETURNS boolean
 LANGUAGE plpgsql STABLE
AS $function$
BEGIN
    RETURN queenside.is_owner() OR queenside.granted(p_queue, p_right, p_group);
END;
$function$;
