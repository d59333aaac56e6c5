-- queenside storage, version 12: keys Citus can keep.
--
-- Citus requires the distribution column in every primary key and unique
-- constraint of a distributed table (SCALING.md, section 2). Two tables
-- broke that:
--   - partitions, whose names were unique per queue: the names move to
--     partition_names (queue_id, name, id), to be a reference table, which
--     ensure_partitions writes first and reads names in. partitions keeps
--     its name (pop returns it) under a plain index, for listings and for
--     sidecars of the release before, which look a partition up by name
--     there. Its id
--     is no identity any more but taken from the sequence partition_ids, so
--     the id is known before the partition row is written;
--   - dead_letters, keyed by id alone: now (partition_id, id), with a plain
--     index on id for the look-ups by id.
-- ensure_partitions keeps its signature and its locking: creators of one
-- queue's partitions run side by side under the queue row's share lock, and
-- two creators of one name meet on partition_names' key.
--
-- On an existing database this writes a partition_names row for every
-- partition and builds three indexes; dead letters are only re-indexed.

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
