-- queenside storage, version 17: autovacuum's ANALYZE of dedup and
-- orphan_hashes reads 300 rows, not 30,000.
--
-- Both tables are read only by key (dedup through dedup_key, a hash index;
-- orphan_hashes through its primary key), but their statistics still
-- decide those plans: without them a probe of a batch of hashes joined
-- from arrays is planned as a sequential scan of dedup. What the plans
-- need is how many rows there are and that a hash is unique, which a
-- sample of 300 rows tells as well as one of 30,000 (the default
-- statistics target of 100, times 300). Both tables grow for as long as
-- the hashes are kept (15 minutes at the least), so autovacuum analyzed
-- each about once a minute at 5,000 msg/s, each time reading 30,000 pages
-- spread over the whole table once it had that many: once dedup outgrew
-- shared_buffers that pass pushed out the pages every push and pop works
-- on. A statistics target of 1 makes the sample 300 rows, from at most
-- 300 pages.
--
-- On an existing database this rewrites nothing: it changes catalog rows
-- under a SHARE UPDATE EXCLUSIVE lock, which pushes, pops and the janitor
-- do not wait for (an autovacuum running on the table at that moment is
-- cancelled and comes again). The statistics already gathered stay until
-- the next ANALYZE.

-- Citus does not carry ALTER COLUMN ... SET STATISTICS to the shards (nor
-- accepts it on a distributed table): on a distributed schema the shell
-- tables are set with that off, and each shard the same way (a schema
-- distributed later copies the targets to its shards).
SET LOCAL citus.enable_ddl_propagation = off;
DO $$
DECLARE
    v_dedup  text := 'ALTER COLUMN partition_id SET STATISTICS 1, ALTER COLUMN hash SET STATISTICS 1,
                      ALTER COLUMN msg_offset SET STATISTICS 1, ALTER COLUMN message_id SET STATISTICS 1,
                      ALTER COLUMN committed_at SET STATISTICS 1';
    v_orphan text := 'ALTER COLUMN purge_after SET STATISTICS 1, ALTER COLUMN partition_id SET STATISTICS 1,
                      ALTER COLUMN last_offset SET STATISTICS 1, ALTER COLUMN committed_at SET STATISTICS 1,
                      ALTER COLUMN hashes SET STATISTICS 1';
    -- The expression dedup_key is built on has statistics of its own; on
    -- a shard, dedup_key's copy is its one index on an expression.
    v_key    text := 'ALTER COLUMN 1 SET STATISTICS 1';
BEGIN
    EXECUTE 'ALTER TABLE queenside.dedup ' || v_dedup;
    EXECUTE 'ALTER INDEX queenside.dedup_key ' || v_key;
    EXECUTE 'ALTER TABLE queenside.orphan_hashes ' || v_orphan;
    -- Two statements: the second is planned only where Citus is.
    IF to_regclass('pg_catalog.pg_dist_partition') IS NULL THEN
        RETURN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition WHERE logicalrelid = 'queenside.dedup'::regclass) THEN
        RETURN;
    END IF;
    PERFORM run_command_on_placements('queenside.dedup', 'ALTER TABLE %s ' || v_dedup);
    PERFORM run_command_on_placements('queenside.dedup', 'DO ''DECLARE k regclass; BEGIN
        SELECT indexrelid INTO STRICT k FROM pg_index WHERE indrelid = ''''%s''''::regclass AND indexprs IS NOT NULL;
        EXECUTE ''''ALTER INDEX '''' || k || '''' ' || v_key || '''''; END''');
    PERFORM run_command_on_placements('queenside.orphan_hashes', 'ALTER TABLE %s ' || v_orphan);
END $$;
