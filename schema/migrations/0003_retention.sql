-- queenside storage, version 3: retention.
--
-- A janitor in every sidecar (sidecar/janitor), one at a time under an
-- advisory lock, calls the functions below every few seconds. They delete
-- by these rules, per queue option, "now" being the start of the call:
--
--   * A segment is deleted when its messages were committed more than
--     retention_seconds ago (when that is > 0), consumed or not.
--   * A segment is deleted when every group of the queue has consumed it
--     (the group's cursor in the partition is past its last offset; a cursor
--     not positioned yet, or a group without a cursor there, has consumed
--     nothing) and its messages were committed more than
--     completed_retention_seconds ago. A queue without groups has consumed
--     nothing: only retention_seconds deletes from it.
--   * A dedup row (a message's transaction id hash) is deleted when it was
--     committed more than max(dedup_window_seconds,
--     completed_retention_seconds, 900) seconds ago, whether its message is
--     still retained or not. So a repeat inside the window is a duplicate
--     even of a message already deleted, and ack resolves a transaction id
--     as long as it did before (0001 looks no further back than this);
--     once the row is gone, a repeat is a new message, as past the window.
--   * dead_letters, groups, cursors, partitions and queues are never
--     touched.
--
-- Both segment rules delete a prefix of a partition (commit times never
-- decrease with offsets, and cursors only consume from the front), and the
-- janitor deletes every partition's segments in offset order, so what is
-- retained of a partition is always one run of offsets up to its end. pop,
-- ack, stats, seek and subscriptions start at the first retained message
-- (first_offset_at); this migration makes pop and ack also skip what was
-- deleted under a cursor (see them at the end).
--
-- The janitor never locks a partition row, so a push never waits for it.
-- Segments are deleted whole, in statements bounded by a number of
-- segments and of messages, each its own short transaction.
--
-- A dedup row has no index on its commit time: one would cost every push
-- another index insertion per message. The janitor finds the hashes to
-- delete from the transaction ids in the segments instead (hashing them as
-- the sidecar does), partition by partition in offset order from a mark;
-- the hashes of a segment deleted before its dedup rows are due are kept in
-- orphan_hashes until then.

-- The hashes of segments deleted before their dedup rows were due, in the
-- order they come due. purge_after is computed with the queue's horizon when
-- the segment was deleted; a horizon raised since postpones it.
CREATE TABLE queenside.orphan_hashes (
    purge_after  timestamptz NOT NULL,
    partition_id bigint      NOT NULL,
    last_offset  bigint      NOT NULL,
    committed_at timestamptz NOT NULL,
    hashes       uuid[]      NOT NULL,
    PRIMARY KEY (purge_after, partition_id, last_offset)
);

-- Per partition, the offset below which every message's dedup row was
-- deleted, or saved in orphan_hashes with its segment. No foreign key: its
-- check would share-lock the partition row, which push holds for update.
CREATE TABLE queenside.dedup_marks (
    partition_id bigint PRIMARY KEY,
    purged_to    bigint NOT NULL
) WITH (fillfactor = 70);

-- transaction_hash is TransactionHash of sidecar/store: the first 128 bits
-- of the SHA-256 of the transaction id's UTF-8 bytes.
CREATE FUNCTION queenside.transaction_hash(p_transaction_id text) RETURNS uuid
LANGUAGE sql STABLE STRICT PARALLEL SAFE AS $$
    SELECT encode(substr(sha256(convert_to(p_transaction_id, 'UTF8')), 1, 16), 'hex')::uuid
$$;

-- dedup_keep is how long a queue keeps its dedup rows (see the rules).
CREATE FUNCTION queenside.dedup_keep(p_dedup_window integer, p_completed_retention integer) RETURNS interval
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT make_interval(secs => greatest(p_dedup_window, p_completed_retention, 900))
$$;

-- consumed_to is the offset below which every group of the queue has
-- consumed the partition; 0 when the queue has no group, or when some group
-- has no positioned cursor there.
CREATE FUNCTION queenside.consumed_to(p_partition bigint, p_queue bigint) RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT coalesce(min(coalesce(cu.committed, 0)), 0)
      FROM queenside.groups g
      LEFT JOIN queenside.cursors cu ON cu.group_id = g.id AND cu.partition_id = p_partition
     WHERE g.queue_id = p_queue
$$;

-- expire_segments deletes the segments the rules allow, partitions in id
-- order from p_from, until about p_max_segments segments or p_max_messages
-- messages are deleted (at least one segment of a partition with any to
-- delete). next_from is the partition to go on from in the next call, NULL
-- when every partition was seen. The hashes of a deleted segment above its
-- partition's dedup mark are saved in orphan_hashes.
CREATE FUNCTION queenside.expire_segments(p_from bigint, p_max_segments integer, p_max_messages integer,
                                          OUT next_from bigint, OUT segments integer, OUT messages bigint,
                                          OUT orphaned integer)
LANGUAGE plpgsql AS $$
DECLARE
    v_now   timestamptz := now();
    w       record;
    v_due   bigint;
    v_bound bigint;
    v_cap   bigint;
    v_n     integer;
    v_m     bigint;
    v_o     integer;
BEGIN
    segments := 0; messages := 0; orphaned := 0;
    -- The partitions whose first segment may go: one index probe each.
    FOR w IN
        SELECT p.id, p.queue_id, f.base_offset AS first_base, f.last_offset AS first_last,
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
                OR (f.committed_at < v_now - make_interval(secs => q.completed_retention_seconds)
                    AND f.last_offset < queenside.consumed_to(p.id, p.queue_id)))
         ORDER BY p.id
    LOOP
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
        WITH gone AS (
            DELETE FROM queenside.segments s
             WHERE s.partition_id = w.id AND s.last_offset < v_bound
            RETURNING s.last_offset, s.base_offset, s.committed_at,
                      CASE WHEN s.last_offset >= w.purged_to THEN s.transaction_ids END AS txids
        ), saved AS (
            INSERT INTO queenside.orphan_hashes (purge_after, partition_id, last_offset, committed_at, hashes)
            SELECT g.committed_at + w.keep, w.id, g.last_offset, g.committed_at,
                   ARRAY(SELECT DISTINCT queenside.transaction_hash(t) FROM unnest(g.txids) t)
              FROM gone g
             WHERE g.txids IS NOT NULL
            RETURNING 1
        )
        SELECT count(*), coalesce(sum(g.last_offset - g.base_offset + 1), 0), (SELECT count(*) FROM saved)
          INTO v_n, v_m, v_o
          FROM gone g;
        segments := segments + v_n;
        messages := messages + v_m;
        orphaned := orphaned + v_o;
        IF v_bound < v_due THEN -- the budget cut this partition short
            next_from := w.id;
            RETURN;
        END IF;
    END LOOP;
END;
$$;

-- purge_dedup deletes the dedup rows that are due of messages still
-- retained, partitions in id order from p_from, reading at most about
-- p_max_segments segments or p_max_messages messages, and moves each
-- partition's mark past the segments it read. next_from is as for
-- expire_segments.
CREATE FUNCTION queenside.purge_dedup(p_from bigint, p_max_segments integer, p_max_messages integer,
                                      OUT next_from bigint, OUT segments integer, OUT messages bigint,
                                      OUT hashes bigint)
LANGUAGE plpgsql
-- Each hash is one primary key lookup: never a scan of dedup, whatever the
-- estimates of the arrays' sizes.
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
DECLARE
    v_now   timestamptz := now();
    w       record;
    v_due   bigint;
    v_bound bigint;
    v_cap   bigint;
    v_n     integer;
    v_m     bigint;
    v_h     bigint;
    v_to    bigint;
BEGIN
    segments := 0; messages := 0; hashes := 0;
    -- The partitions whose first segment above the mark is due.
    FOR w IN
        SELECT p.id, f.base_offset AS first_base, f.last_offset AS first_last,
               v_now - queenside.dedup_keep(q.dedup_window_seconds, q.completed_retention_seconds) AS cutoff
          FROM queenside.partitions p
          JOIN queenside.queues q ON q.id = p.queue_id
          LEFT JOIN queenside.dedup_marks m ON m.partition_id = p.id
         CROSS JOIN LATERAL (SELECT s.base_offset, s.last_offset, s.committed_at FROM queenside.segments s
                              WHERE s.partition_id = p.id AND s.last_offset >= coalesce(m.purged_to, 0)
                              ORDER BY s.last_offset LIMIT 1) f
         WHERE p.id >= p_from
           AND f.committed_at < v_now - queenside.dedup_keep(q.dedup_window_seconds, q.completed_retention_seconds)
         ORDER BY p.id
    LOOP
        IF segments >= p_max_segments OR messages >= p_max_messages THEN
            next_from := w.id;
            RETURN;
        END IF;
        v_due := queenside.first_offset_at(w.id, w.cutoff);
        v_bound := least(v_due, greatest(w.first_last + 1, w.first_base + (p_max_messages - messages)));
        v_cap := (SELECT s.last_offset FROM queenside.segments s
                   WHERE s.partition_id = w.id AND s.last_offset >= w.first_last AND s.last_offset < v_bound
                   ORDER BY s.last_offset OFFSET p_max_segments - segments - 1 LIMIT 1);
        IF v_cap IS NOT NULL THEN
            v_bound := v_cap + 1;
        END IF;
        -- A row is deleted by its own commit time: one taken over since by a
        -- later message with the same transaction id is that message's.
        WITH seg AS MATERIALIZED (
            SELECT s.last_offset, s.base_offset, s.transaction_ids FROM queenside.segments s
             WHERE s.partition_id = w.id AND s.last_offset >= w.first_last AND s.last_offset < v_bound
        ), gone AS (
            DELETE FROM queenside.dedup d
             USING (SELECT DISTINCT queenside.transaction_hash(t) AS h FROM seg, unnest(seg.transaction_ids) t) x
             WHERE d.partition_id = w.id AND d.hash = x.h AND d.committed_at < w.cutoff
            RETURNING 1
        )
        SELECT count(*), coalesce(sum(seg.last_offset - seg.base_offset + 1), 0), max(seg.last_offset),
               (SELECT count(*) FROM gone)
          INTO v_n, v_m, v_to, v_h
          FROM seg;
        INSERT INTO queenside.dedup_marks AS dm (partition_id, purged_to) VALUES (w.id, v_to + 1)
            ON CONFLICT (partition_id) DO UPDATE SET purged_to = greatest(dm.purged_to, excluded.purged_to);
        segments := segments + v_n;
        messages := messages + v_m;
        hashes := hashes + v_h;
        IF v_bound < v_due THEN
            next_from := w.id;
            RETURN;
        END IF;
    END LOOP;
END;
$$;

-- purge_orphan_hashes deletes the dedup rows of deleted segments that came
-- due, oldest first, at most p_max_rows segments' or about p_max_hashes
-- hashes' worth (at least one segment's). more says whether more are due.
CREATE FUNCTION queenside.purge_orphan_hashes(p_max_rows integer, p_max_hashes integer,
                                              OUT segments integer, OUT hashes bigint, OUT more boolean)
LANGUAGE plpgsql
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
DECLARE
    v_now timestamptz := now();
BEGIN
    WITH due AS MATERIALIZED (
        -- A partition that is gone (its queue deleted) keeps nothing.
        SELECT o.purge_after, o.partition_id, o.last_offset, o.committed_at, o.hashes,
               coalesce(v_now - queenside.dedup_keep(q.dedup_window_seconds, q.completed_retention_seconds),
                        'infinity') AS cutoff
          FROM (SELECT o.*, sum(cardinality(o.hashes)) OVER (ORDER BY o.purge_after, o.partition_id, o.last_offset)
                            - cardinality(o.hashes) AS before
                  FROM queenside.orphan_hashes o
                 WHERE o.purge_after < v_now
                 ORDER BY o.purge_after, o.partition_id, o.last_offset
                 LIMIT p_max_rows) o
          LEFT JOIN queenside.partitions p ON p.id = o.partition_id
          LEFT JOIN queenside.queues q ON q.id = p.queue_id
         WHERE o.before < p_max_hashes
    ), gone AS (
        DELETE FROM queenside.dedup d
         USING (SELECT due.partition_id, due.cutoff, h FROM due, unnest(due.hashes) h
                 WHERE due.committed_at < due.cutoff) x
         WHERE d.partition_id = x.partition_id AND d.hash = x.h AND d.committed_at < x.cutoff
        RETURNING 1
    ), done AS (
        DELETE FROM queenside.orphan_hashes o
         USING due
         WHERE o.purge_after = due.purge_after AND o.partition_id = due.partition_id
           AND o.last_offset = due.last_offset AND due.committed_at < due.cutoff
        RETURNING 1
    ), postponed AS (
        -- The queue keeps its hashes longer than when the segment went.
        UPDATE queenside.orphan_hashes o
           SET purge_after = due.committed_at + (v_now - due.cutoff)
          FROM due
         WHERE o.purge_after = due.purge_after AND o.partition_id = due.partition_id
           AND o.last_offset = due.last_offset AND due.committed_at >= due.cutoff
        RETURNING 1
    )
    SELECT count(*), (SELECT count(*) FROM gone) INTO segments, hashes FROM due;
    more := EXISTS (SELECT 1 FROM queenside.orphan_hashes o WHERE o.purge_after < v_now);
END;
$$;

-- pop, as in 0001, but for a cursor behind the first retained message: it
-- starts there (past the end when nothing from the cursor on is retained),
-- a cursor with nothing to deliver moves past what was deleted, and a lease
-- whose messages were all deleted while pop read them is not kept.
CREATE OR REPLACE FUNCTION queenside.pop(p_group bigint, p_partition bigint, p_max_partitions integer,
                              p_batch integer, p_lease_seconds integer, p_auto_ack boolean)
RETURNS TABLE (partition_id bigint, partition_name text, lease_id uuid, lease_from bigint, lease_to bigint,
               lease_expires_at timestamptz, head_attempts integer, seen_to bigint,
               first_offset bigint, committed_at timestamptz, message_ids uuid[], transaction_ids text[],
               payloads bytea[], trace_ids text[], headers bytea[])
LANGUAGE plpgsql
-- As 0002 set them: CREATE OR REPLACE resets a function's settings.
SET enable_sort = off
SET jit = off
AS $$
DECLARE
    v_start_at  timestamptz;
    v_delay     interval;
    v_lease_len interval;
    v_now       timestamptz := now();
    v_left      integer := p_batch;
    c           record;
    v_pids      bigint[];
    v_cur       bigint;
    v_last      bigint;
    v_lease     uuid;
    v_expires   timestamptz;
    v_seen      bigint;
    v_delivered bigint[];
    v_attempts  integer;
BEGIN
    SELECT g.start_at, make_interval(secs => q.delay_seconds),
           make_interval(secs => coalesce(p_lease_seconds, q.lease_seconds))
      INTO v_start_at, v_delay, v_lease_len
      FROM queenside.groups g JOIN queenside.queues q ON q.id = g.queue_id
     WHERE g.id = p_group;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'queenside: group % does not exist', p_group USING ERRCODE = 'no_data_found';
    END IF;

    -- A subscription that started since: position its cursors now.
    IF v_start_at <= v_now AND EXISTS (SELECT 1 FROM queenside.cursors cu
                                        WHERE cu.group_id = p_group AND cu.committed IS NULL) THEN
        UPDATE queenside.cursors cu
           SET committed = x.cur, head_at = queenside.cursor_head(cu.partition_id, x.cur)
          FROM (SELECT c2.partition_id, queenside.first_offset_at(c2.partition_id, v_start_at) AS cur
                  FROM queenside.cursors c2 WHERE c2.group_id = p_group AND c2.committed IS NULL) x
         WHERE cu.group_id = p_group AND cu.partition_id = x.partition_id;
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

    FOR c IN
        SELECT cu.partition_id AS pid, p.name AS pname, cu.delivered_to, cu.fail_offsets, cu.fail_counts,
               cu.committed, cu.head_at, cu.committed AS cur, p.next_offset
          FROM unnest(v_pids) WITH ORDINALITY AS x (pid, ord)
          JOIN queenside.cursors cu ON cu.group_id = p_group AND cu.partition_id = x.pid
          JOIN queenside.partitions p ON p.id = x.pid
         ORDER BY x.ord
    LOOP
        EXIT WHEN v_left <= 0;
        -- Start at the cursor, or at the first message still retained: past
        -- the end when retention deleted everything from the cursor on.
        v_cur := greatest(c.cur, coalesce((SELECT s.base_offset FROM queenside.segments s
                                            WHERE s.partition_id = c.pid AND s.last_offset >= c.cur
                                            ORDER BY s.last_offset LIMIT 1), c.next_offset));
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
        IF v_cur IS NULL OR v_last IS NULL OR v_last < v_cur THEN
            -- Nothing to deliver now. A cursor standing on messages that
            -- retention deleted moves past them: otherwise its old head time
            -- would put this partition first in every pop, for nothing.
            IF v_cur > c.cur THEN
                UPDATE queenside.cursors cu
                   SET committed = v_cur, head_at = queenside.cursor_head(c.pid, v_cur),
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
            UPDATE queenside.cursors cu
               SET committed = v_last + 1, head_at = queenside.cursor_head(c.pid, v_last + 1),
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
            UPDATE queenside.cursors cu
               SET committed = v_cur,
                   head_at = CASE WHEN v_cur = c.committed THEN c.head_at ELSE queenside.cursor_head(c.pid, v_cur) END,
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
$$;

-- ack, as in 0001, but when retention deleted the cursor's message under a
-- lease the cursor moves over the completed run from the first retained
-- message, and a message deleted before it could be dead-lettered is not
-- reported dead-lettered.
CREATE OR REPLACE FUNCTION queenside.ack(p_group bigint, p_partition bigint, p_lease uuid,
                              p_offsets bigint[], p_hashes uuid[], p_failed boolean[], p_errors text[])
RETURNS TABLE (idx integer, success boolean, code text, dead_lettered boolean, released boolean, cursor_offset bigint)
LANGUAGE plpgsql AS $$
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
             WHERE d.partition_id = p_partition AND d.hash = p_hashes[i] AND d.committed_at > now() - v_keep;
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

    UPDATE queenside.cursors cu
       SET committed = v_cursor,
           head_at = CASE WHEN v_cursor = c.committed THEN c.head_at
                          ELSE queenside.cursor_head(p_partition, v_cursor) END,
           lease_id = CASE WHEN v_release THEN NULL ELSE c.lease_id END,
           lease_done = CASE WHEN v_release THEN NULL
                             ELSE ARRAY(SELECT DISTINCT x FROM unnest(v_done) x WHERE x > v_cursor ORDER BY x) END,
           delivered_to = ARRAY(SELECT x FROM unnest(c.delivered_to) x WHERE x >= v_cursor ORDER BY x),
           fail_offsets = ARRAY(SELECT o FROM unnest(v_fo, v_fc) f (o, k) WHERE o >= v_cursor ORDER BY o),
           fail_counts = ARRAY(SELECT k FROM unnest(v_fo, v_fc) f (o, k) WHERE o >= v_cursor ORDER BY o)
     WHERE cu.group_id = p_group AND cu.partition_id = p_partition;

    -- A rewind makes messages deliverable again at once: wake waiting pops.
    IF v_fail IS NOT NULL THEN
        PERFORM queenside.wake(v_queue);
    END IF;

    RETURN QUERY
    SELECT g.i, v_code[g.i] IS NULL, v_code[g.i], v_dead[g.i], v_release, v_cursor
      FROM generate_series(1, n) g (i);
END;
$$;
