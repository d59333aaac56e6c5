-- queenside storage, version 2: pop takes its candidate partitions in index
-- order, whatever the statistics say.
--
-- A pop picks the ready partitions whose next message waited longest:
-- cursors_ready is ordered that way, so the right plan walks it and stops
-- after p_max_partitions rows. The planner chooses it only when it believes
-- many cursors are ready. Statistics gathered when a group was created (every
-- head_at still null) say almost none are, and the plan it then caches sorts
-- every ready cursor of the group on each pop: 2.9 ms instead of 0.09 ms with
-- 1,000 ready partitions, until autovacuum analyzes the table again. Sorting
-- is never the better plan inside pop (its other sorts are of a few array
-- elements, which still happen), so it is priced out for the function.
-- Pricing it out makes those small sorts look expensive enough to start
-- PostgreSQL's JIT compiler (50 ms a statement), so JIT is off for it too:
-- nothing in pop runs long enough to gain from compiling.
ALTER FUNCTION queenside.pop(bigint, bigint, integer, integer, integer, boolean)
    SET enable_sort = off
    SET jit = off;

-- Statistics of cursors also go stale when many partitions appear after a
-- group exists: a group believed to have nine cursors has its cursors read
-- in full on every pop instead of looked up one by one. ensure_partitions
-- therefore analyzes cursors when the rows it adds are more than half of
-- what the statistics know of, so estimates stay within a factor of two of
-- the truth at the price of a logarithmic number of ANALYZEs as a queue grows.
CREATE OR REPLACE FUNCTION queenside.ensure_partitions(p_queue text, p_names text[])
RETURNS TABLE (o_name text, o_id bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_queue   bigint;
    v_missing text[];
    v_added   bigint;
BEGIN
    v_missing := ARRAY(
        SELECT n FROM unnest(p_names) n
         WHERE NOT EXISTS (SELECT 1 FROM queenside.partitions p
                             JOIN queenside.queues q ON q.id = p.queue_id
                            WHERE q.name = p_queue AND p.name = n));
    IF cardinality(v_missing) > 0 THEN
        INSERT INTO queenside.queues (name) VALUES (p_queue) ON CONFLICT DO NOTHING;
        SELECT q.id INTO v_queue FROM queenside.queues q WHERE q.name = p_queue FOR UPDATE;
        -- A new partition is empty: a group whose subscription has started
        -- reads it from offset 0; one that starts later is positioned then.
        WITH created AS (
            INSERT INTO queenside.partitions (queue_id, name)
            SELECT v_queue, n FROM unnest(v_missing) n
            ON CONFLICT (queue_id, name) DO NOTHING
            RETURNING queenside.partitions.id)
        INSERT INTO queenside.cursors (group_id, partition_id, committed)
        SELECT g.id, c.id, CASE WHEN g.start_at IS NULL OR g.start_at <= clock_timestamp() THEN 0 END
          FROM created c, queenside.groups g
         WHERE g.queue_id = v_queue;
        GET DIAGNOSTICS v_added = ROW_COUNT;
        IF v_added > 0 AND v_added * 2 > (SELECT greatest(c.reltuples, 0) FROM pg_class c
                                           WHERE c.oid = 'queenside.cursors'::regclass) THEN
            ANALYZE queenside.cursors;
        END IF;
    END IF;
    RETURN QUERY
    SELECT p.name, p.id FROM queenside.partitions p
      JOIN queenside.queues q ON q.id = p.queue_id
     WHERE q.name = p_queue AND p.name = ANY (p_names);
END;
$$;
