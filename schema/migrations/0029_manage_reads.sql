-- queenside storage, version 29: manage includes read.
--
-- A role that manages a queue (configures and pauses it, seeks its
-- groups, replays and deletes its dead letters) must see what it manages:
-- a pause keeps the queue's other options, which it reads first, and a
-- replay chosen from the dead letters' list reads that list. So a grant of
-- manage allows read too; the other rights stay apart. granted() is still
-- the one place a right is decided.

CREATE OR REPLACE FUNCTION queenside.granted(p_queue text, p_right text, p_group text) RETURNS boolean
 LANGUAGE plpgsql STABLE SECURITY DEFINER
 SET search_path = pg_catalog
AS $function$
BEGIN
    RETURN EXISTS (
        SELECT 1 FROM queenside.queue_grants g
         WHERE g.role = session_user::text COLLATE "default"
           AND queenside.matches(g.queue, p_queue)
           AND (p_right = ANY (g.rights) OR p_right = 'read' AND 'manage' = ANY (g.rights))
           AND (p_right <> 'consume' OR p_group IS NULL OR g.groups IS NULL OR queenside.matches(g.groups, p_group)));
END;
$function$;
