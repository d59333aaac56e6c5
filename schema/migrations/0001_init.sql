-- queenside storage, version 1.
--
-- Messages are stored in segments: one row per push transaction per
-- partition, holding its messages in parallel arrays. PostgreSQL writes one
-- heap row and one index entry per segment instead of per message, which is
-- what makes batched pushes cheap (BENCHMARKS.md). The 128-bit hashes of the
-- transaction ids live beside them in dedup, one row per message, so that the
-- duplicate verdict is exact.

CREATE TABLE queenside.queues (
    id                          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name                        text        NOT NULL UNIQUE,
    lease_seconds               integer     NOT NULL DEFAULT 60,
    retry_limit                 integer     NOT NULL DEFAULT 3,
    dedup_window_seconds        integer     NOT NULL DEFAULT 3600,
    retention_seconds           integer     NOT NULL DEFAULT 0,
    completed_retention_seconds integer     NOT NULL DEFAULT 86400,
    delay_seconds               integer     NOT NULL DEFAULT 0,
    created_at                  timestamptz NOT NULL DEFAULT now()
);

-- One ordered lane. Its row lock serialises offset allocation: a push holds
-- it from the duplicate probe to the commit, so offsets are gapless and
-- commit times never decrease. Updated by every push; the low fill factor
-- keeps those updates HOT.
CREATE TABLE queenside.partitions (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue_id          bigint      NOT NULL REFERENCES queenside.queues (id) ON DELETE CASCADE,
    name              text        NOT NULL,
    next_offset       bigint      NOT NULL DEFAULT 0,
    last_committed_at timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    UNIQUE (queue_id, name)
) WITH (fillfactor = 50);

-- Messages base_offset..last_offset of one partition, committed together.
-- Keyed by the last offset so that "the segments holding offset X onwards" is
-- one index range scan: last_offset >= X.
--
-- segments and dedup carry no foreign keys: each would cost a lookup of the
-- partition row per inserted row, on the hottest path there is. Only push()
-- writes them, and it holds the partition row lock while it does.
CREATE TABLE queenside.segments (
    partition_id    bigint      NOT NULL,
    last_offset     bigint      NOT NULL,
    base_offset     bigint      NOT NULL,
    committed_at    timestamptz NOT NULL,
    message_ids     uuid[]      NOT NULL,
    transaction_ids text[]      NOT NULL,
    payloads        bytea[]     NOT NULL,
    trace_ids       text[],     -- NULL when no message of the segment has one
    headers         bytea[],    -- msgpack maps; NULL when no message has any
    PRIMARY KEY (partition_id, last_offset)
);

-- The identity of every stored message: the 128-bit hash of its transaction
-- id, written whether deduplication is on or off.
-- Payloads are stored as they came: compressing them on the push path costs
-- more CPU than the disk it saves, and what is compressible is the
-- producer's to compress.
ALTER TABLE queenside.segments ALTER COLUMN payloads SET STORAGE EXTERNAL;

CREATE TABLE queenside.dedup (
    partition_id bigint      NOT NULL,
    hash         uuid        NOT NULL,
    msg_offset   bigint      NOT NULL,
    message_id   uuid        NOT NULL,
    committed_at timestamptz NOT NULL,
    PRIMARY KEY (partition_id, hash)
);

-- push stores the messages of one transaction, in any number of partitions,
-- in array order. Under the row locks of those partitions it decides, for
-- each message, whether it is new or a duplicate of a message stored inside
-- its queue's window, gives the new ones the next offsets of their
-- partition in order, and writes one segment per partition. A duplicate
-- writes nothing.
--
-- The messages come grouped by partition: p_ids lists the partitions
-- (distinct, in id order), and partition k's messages are positions
-- p_starts[k] .. p_starts[k]+p_counts[k]-1 of the message arrays, in their
-- order; p_slots[i] is message i's k.
-- p_leaders is NULL when no transaction id repeats inside a partition of
-- the call (the caller knows, from the call alone); otherwise p_leaders[i]
-- is the position of the first message with message i's partition and
-- hash. With deduplication on, a repeat is a duplicate of that first
-- message (first wins); with it off, every message is stored.
--
-- The answer is one row: the commit time, each partition's first offset
-- allocated (new messages take consecutive offsets from it, in order) and
-- whether its queue deduplicates, and the positions of the messages found
-- stored already, with their originals.
--
-- The common case, no repeat and nothing stored already, costs one index
-- insertion per message and one segment row per partition: the insert into
-- dedup is itself the probe (ON CONFLICT ... WHERE outside the window).
-- Anything else takes the general path.
CREATE FUNCTION queenside.push(
    p_ids             bigint[],
    p_starts          integer[],
    p_counts          integer[],
    p_slots           integer[],
    p_hashes          uuid[],
    p_leaders         integer[],
    p_message_ids     uuid[],
    p_transaction_ids text[],
    p_payloads        bytea[],
    p_trace_ids       text[],
    p_headers         bytea[],
    OUT committed_at     timestamptz,
    OUT bases            bigint[],
    OUT dedup_on         boolean[],
    OUT dup_positions    integer[],
    OUT dup_offsets      bigint[],
    OUT dup_message_ids  uuid[],
    OUT dup_committed_at timestamptz[]
)
LANGUAGE plpgsql AS $$
DECLARE
    n       integer := cardinality(p_hashes);
    v_at    timestamptz;
    v_count integer := -1; -- messages stored; -1 until known
    v_found integer;
BEGIN
    -- Every partition's row lock, taken in id order so that two pushes can
    -- never deadlock. The locks serialise offset allocation: they are what
    -- makes offsets gapless and commit times monotone.
    SELECT array_agg(l.next_offset ORDER BY l.id), array_agg(l.dedup ORDER BY l.id),
           max(l.last_committed_at), count(*)
      INTO bases, dedup_on, v_at, v_found
      FROM (SELECT p.id, p.next_offset, p.last_committed_at, q.dedup_window_seconds > 0 AS dedup
              FROM queenside.partitions p
              JOIN queenside.queues q ON q.id = p.queue_id
             WHERE p.id = ANY (p_ids)
             ORDER BY p.id
               FOR UPDATE OF p) l;
    IF v_found <> cardinality(p_ids) THEN
        RAISE EXCEPTION 'queenside: % of % partitions exist', v_found, cardinality(p_ids)
            USING ERRCODE = 'no_data_found';
    END IF;
    -- Read the clock only once the locks are held, and never behind a last
    -- commit, so commit times never decrease with offset.
    v_at := greatest(clock_timestamp(), v_at);
    committed_at := v_at;

    IF p_leaders IS NULL THEN
        -- Tentatively every message is new. A hash stored inside its
        -- window is left alone (and not counted); one outside it, or in a
        -- queue that does not deduplicate, is taken over.
        INSERT INTO queenside.dedup AS d (partition_id, hash, msg_offset, message_id, committed_at)
        SELECT p_ids[u.s], u.h, bases[u.s] + (u.o - p_starts[u.s]), u.m, v_at
          FROM unnest(p_slots, p_hashes, p_message_ids) WITH ORDINALITY AS u (s, h, m, o)
        ON CONFLICT (partition_id, hash) DO UPDATE
           SET msg_offset = excluded.msg_offset, message_id = excluded.message_id, committed_at = excluded.committed_at
         WHERE d.committed_at <= v_at - (SELECT make_interval(secs => q.dedup_window_seconds)
                                          FROM queenside.partitions p JOIN queenside.queues q ON q.id = p.queue_id
                                         WHERE p.id = d.partition_id);
        GET DIAGNOSTICS v_count = ROW_COUNT;
    END IF;

    IF v_count = n THEN -- every message is new
        IF cardinality(p_ids) = 1 THEN -- the segment is the input as it is
            INSERT INTO queenside.segments (partition_id, last_offset, base_offset, committed_at,
                                            message_ids, transaction_ids, payloads, trace_ids, headers)
            VALUES (p_ids[1], bases[1] + n - 1, bases[1], v_at,
                    p_message_ids, p_transaction_ids, p_payloads, p_trace_ids, p_headers);
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
        UPDATE queenside.partitions p SET next_offset = p.next_offset + c.n, last_committed_at = v_at
          FROM unnest(p_ids, p_counts) AS c (id, n)
         WHERE p.id = c.id;
        -- Groups waiting at the end of these partitions now have a head.
        UPDATE queenside.cursors cu SET head_at = v_at
         WHERE cu.partition_id = ANY (p_ids) AND cu.head_at IS NULL AND cu.committed IS NOT NULL;
    ELSE
        PERFORM queenside.push_general(v_at, p_ids, bases, p_slots, p_hashes, p_leaders,
                                       p_message_ids, p_transaction_ids, p_payloads, p_trace_ids, p_headers);
        UPDATE queenside.cursors cu SET head_at = v_at
          FROM unnest(p_ids, bases) AS b (id, base)
          JOIN queenside.partitions p ON p.id = b.id
         WHERE p.next_offset > b.base
           AND cu.partition_id = b.id AND cu.head_at IS NULL AND cu.committed IS NOT NULL;
        -- The messages stored already, with their originals: hashes that
        -- still name an offset below their partition's base.
        SELECT array_agg(u.o ORDER BY u.o), array_agg(d.msg_offset ORDER BY u.o),
               array_agg(d.message_id ORDER BY u.o), array_agg(d.committed_at ORDER BY u.o)
          INTO dup_positions, dup_offsets, dup_message_ids, dup_committed_at
          FROM unnest(p_slots, p_hashes, coalesce(p_leaders, '{}')) WITH ORDINALITY AS u (s, h, l, o)
         CROSS JOIN LATERAL (
               SELECT d.msg_offset, d.message_id, d.committed_at FROM queenside.dedup d
                WHERE d.partition_id = p_ids[u.s] AND d.hash = u.h AND d.msg_offset < bases[u.s]
                LIMIT 1) d
         WHERE coalesce(u.l, u.o) = u.o;
    END IF;

    -- Wake the pops waiting on these queues, on every sidecar. Delivered
    -- at commit; identical notifications of one transaction fold into one.
    PERFORM queenside.wake(q.name)
       FROM queenside.queues q
      WHERE q.id IN (SELECT p.queue_id FROM queenside.partitions p WHERE p.id = ANY (p_ids));
END;
$$;

-- push_general is push's path for calls with repeats inside a partition, or
-- with messages stored already (inside their window). In each partition it
-- keeps the messages to store (with deduplication on: the first of each
-- hash, unless stored already; off: all), gives them the next offsets in
-- order, records their hashes, writes their segment and advances the
-- partition. A tentative hash row that push wrote (offset >= base) is
-- rewritten with the final offset; an original (offset < base) is kept.
CREATE FUNCTION queenside.push_general(
    p_at timestamptz, p_ids bigint[], p_bases bigint[], p_slots integer[], p_hashes uuid[],
    p_leaders integer[], p_message_ids uuid[], p_transaction_ids text[],
    p_payloads bytea[], p_trace_ids text[], p_headers bytea[]
) RETURNS void
LANGUAGE sql AS $$
    WITH part AS (
        SELECT b.id, b.base, q.dedup_window_seconds > 0 AS dedup,
               p_at - make_interval(secs => q.dedup_window_seconds) AS cutoff
          FROM unnest(p_ids, p_bases) AS b (id, base)
          JOIN queenside.partitions p ON p.id = b.id
          JOIN queenside.queues q ON q.id = p.queue_id
    ), fresh AS (
        SELECT u.pid, u.o, u.h, u.m, u.txid, u.payload, u.trace, u.hdr,
               pt.base + row_number() OVER (PARTITION BY u.pid ORDER BY u.o) - 1 AS off
          FROM (SELECT p_ids[x.s] AS pid, x.*
                  FROM unnest(p_slots, p_hashes, coalesce(p_leaders, '{}'), p_message_ids, p_transaction_ids,
                              p_payloads, p_trace_ids, p_headers)
                       WITH ORDINALITY AS x (s, h, l, m, txid, payload, trace, hdr, o)) u
          JOIN part pt ON pt.id = u.pid
         WHERE NOT pt.dedup
            OR (coalesce(u.l, u.o) = u.o
                AND NOT EXISTS (SELECT 1 FROM queenside.dedup d
                                 WHERE d.partition_id = u.pid AND d.hash = u.h
                                   AND d.msg_offset < pt.base AND d.committed_at > pt.cutoff))
    ), hashes AS (
        INSERT INTO queenside.dedup AS d (partition_id, hash, msg_offset, message_id, committed_at)
        SELECT DISTINCT ON (f.pid, f.h) f.pid, f.h, f.off, f.m, p_at
          FROM fresh f
         ORDER BY f.pid, f.h, f.off DESC
        ON CONFLICT (partition_id, hash) DO UPDATE
           SET msg_offset = excluded.msg_offset, message_id = excluded.message_id,
               committed_at = excluded.committed_at
    ), segments AS (
        INSERT INTO queenside.segments (partition_id, last_offset, base_offset, committed_at,
                                        message_ids, transaction_ids, payloads, trace_ids, headers)
        SELECT f.pid, max(f.off), min(f.off), p_at,
               array_agg(f.m ORDER BY f.off), array_agg(f.txid ORDER BY f.off),
               array_agg(f.payload ORDER BY f.off),
               CASE WHEN bool_or(f.trace IS NOT NULL) THEN array_agg(f.trace ORDER BY f.off) END,
               CASE WHEN bool_or(f.hdr IS NOT NULL) THEN array_agg(f.hdr ORDER BY f.off) END
          FROM fresh f
         GROUP BY f.pid
    )
    UPDATE queenside.partitions p
       SET next_offset = c.last + 1, last_committed_at = p_at
      FROM (SELECT f.pid, max(f.off) AS last FROM fresh f GROUP BY f.pid) c
     WHERE p.id = c.pid
$$;

-- Consumer groups, cursors, leases, dead letters.
--
-- Consumption never touches the messages: a group's position in a partition
-- is one cursor row, and acknowledging is moving it (an offset commit). The
-- cursor row also holds the group's one live lease on the partition, so the
-- one-lease rule is a row lock and a condition, never sidecar memory.

CREATE TABLE queenside.groups (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue_id          bigint      NOT NULL REFERENCES queenside.queues (id) ON DELETE CASCADE,
    name              text        NOT NULL,  -- '' is the queue's shared group (queue mode)
    subscription_mode text        NOT NULL,  -- all | new | from
    start_at          timestamptz,           -- first commit time delivered; NULL: the oldest retained message
    created_at        timestamptz NOT NULL DEFAULT now(),
    UNIQUE (queue_id, name)
);

-- One row per (group, partition), created with the later of the two. The
-- lease columns are the group's single lease on the partition; an expired
-- lease is simply ignored and overwritten by the next pop.
CREATE TABLE queenside.cursors (
    group_id         bigint      NOT NULL REFERENCES queenside.groups (id) ON DELETE CASCADE,
    partition_id     bigint      NOT NULL,
    committed        bigint,     -- next offset to consume; NULL until positioned (see ensure_group)
    -- Commit time of the message at committed, NULL when there is none yet:
    -- pop orders partitions by it without looking at their segments. Set
    -- where the cursor moves, and by push for a cursor waiting at the end.
    head_at          timestamptz,
    lease_id         uuid,
    lease_from       bigint,
    lease_to         bigint,
    lease_expires_at timestamptz,
    lease_done       bigint[],   -- offsets completed past a gap, remembered while the lease lives
    -- Last offset of every lease that reached at or past the cursor: a
    -- message was delivered before iff some entry is >= its offset, and
    -- the head's delivery count is the number of entries.
    delivered_to     bigint[]    NOT NULL DEFAULT '{}',
    -- Explicit failures of messages at or past the cursor (the retry budget).
    fail_offsets     bigint[]    NOT NULL DEFAULT '{}',
    fail_counts      integer[]   NOT NULL DEFAULT '{}',
    PRIMARY KEY (group_id, partition_id)
) WITH (fillfactor = 70);

CREATE INDEX cursors_partition ON queenside.cursors (partition_id);
-- pop takes a group's partitions in the order their next message arrived:
-- this index hands them over in that order, without a look at the others.
CREATE INDEX cursors_ready ON queenside.cursors (group_id, head_at, partition_id) WHERE head_at IS NOT NULL;
-- Cursors of a subscription that starts in the future, positioned then.
CREATE INDEX cursors_unpositioned ON queenside.cursors (group_id) WHERE committed IS NULL;


-- Messages whose retry budget ran out. Names are copied so an entry outlives
-- the retention of its message, its group and its queue.
CREATE TABLE queenside.dead_letters (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue_id       bigint      NOT NULL,
    partition_id   bigint      NOT NULL,
    group_id       bigint      NOT NULL,
    queue_name     text        NOT NULL,
    partition_name text        NOT NULL,
    group_name     text        NOT NULL,
    msg_offset     bigint      NOT NULL,
    message_id     uuid        NOT NULL,
    transaction_id text        NOT NULL,
    payload        bytea       NOT NULL,
    trace_id       text,
    headers        bytea,
    error          text,
    failures       integer     NOT NULL,
    committed_at   timestamptz NOT NULL,
    dead_at        timestamptz NOT NULL DEFAULT now(),
    replayed_at    timestamptz,
    replay_message_id     uuid,
    replay_transaction_id text,
    replay_offset         bigint
);

CREATE INDEX dead_letters_queue ON queenside.dead_letters (queue_name, id);

-- Wakes waiting pops on every sidecar: the payload is the queue name.
-- push() and the functions that make messages deliverable again call it.
CREATE FUNCTION queenside.wake(p_queue text) RETURNS void
LANGUAGE sql AS $$ SELECT pg_notify('queenside_wake', p_queue) $$;

-- ensure_partitions returns the ids of a queue's partitions, creating the
-- queue (with default options) and the missing partitions on first use,
-- with the cursor row of every group of the queue. Creating partitions and
-- creating a group both lock the queue row, so neither can miss the other's
-- rows, and racing first pushes agree on the ids. One call covers all the
-- partitions of a push: the lock is taken once, not once per partition.
CREATE FUNCTION queenside.ensure_partitions(p_queue text, p_names text[])
RETURNS TABLE (o_name text, o_id bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_queue   bigint;
    v_missing text[];
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
    END IF;
    RETURN QUERY
    SELECT p.name, p.id FROM queenside.partitions p
      JOIN queenside.queues q ON q.id = p.queue_id
     WHERE q.name = p_queue AND p.name = ANY (p_names);
END;
$$;

-- ensure_group returns a group's id, creating the queue and the group on
-- first use. The subscription is recorded only then: later pops' modes are
-- ignored. 'new' starts at this moment, 'from' at the given time.
CREATE FUNCTION queenside.ensure_group(p_queue text, p_group text, p_mode text, p_from timestamptz,
                                       OUT o_group bigint, OUT o_queue bigint)
LANGUAGE plpgsql AS $$
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
    INSERT INTO queenside.groups (queue_id, name, subscription_mode, start_at)
    VALUES (o_queue, p_group, p_mode,
            CASE p_mode WHEN 'new' THEN clock_timestamp() WHEN 'from' THEN p_from END)
    ON CONFLICT (queue_id, name) DO NOTHING
    RETURNING id INTO o_group;
    IF o_group IS NULL THEN -- created meanwhile by someone who held the lock before us
        SELECT g.id INTO o_group FROM queenside.groups g WHERE g.queue_id = o_queue AND g.name = p_group;
        RETURN;
    END IF;
    -- Position the group in every partition now (unless its subscription
    -- starts in the future), so pops never have to.
    INSERT INTO queenside.cursors (group_id, partition_id, committed, head_at)
    SELECT o_group, c.id, c.cur, CASE WHEN c.cur IS NOT NULL THEN queenside.cursor_head(c.id, c.cur) END
      FROM (SELECT p.id, queenside.first_offset_at(p.id, g.start_at) AS cur
              FROM queenside.partitions p, queenside.groups g
             WHERE p.queue_id = o_queue AND g.id = o_group
               AND (g.start_at IS NULL OR g.start_at <= clock_timestamp())
            UNION ALL
            SELECT p.id, NULL FROM queenside.partitions p, queenside.groups g
             WHERE p.queue_id = o_queue AND g.id = o_group AND g.start_at > clock_timestamp()) c;
    -- A new group adds a cursor per partition at once; without fresh
    -- statistics pop's plans would treat the group as empty (sorting every
    -- cursor instead of reading them in order) until autovacuum came by.
    ANALYZE queenside.cursors;
END;
$$;

-- first_offset_at is the offset of the first retained message committed at
-- or after p_at (any, when NULL), or the next offset when there is none.
-- Commit times grow with offsets, so it is a binary search over the
-- segments by their primary key: no index on commit times has to be kept up
-- on the push path for these rare questions (subscriptions, seeks).
CREATE FUNCTION queenside.first_offset_at(p_partition bigint, p_at timestamptz) RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_lo   bigint;
    v_hi   bigint;
    v_mid  bigint;
    v_last bigint;
    v_time timestamptz;
BEGIN
    SELECT s.base_offset INTO v_lo FROM queenside.segments s
     WHERE s.partition_id = p_partition ORDER BY s.last_offset LIMIT 1;
    SELECT s.last_offset, s.committed_at INTO v_hi, v_time FROM queenside.segments s
     WHERE s.partition_id = p_partition ORDER BY s.last_offset DESC LIMIT 1;
    IF v_lo IS NULL OR v_time < p_at THEN -- nothing retained qualifies
        RETURN (SELECT p.next_offset FROM queenside.partitions p WHERE p.id = p_partition);
    END IF;
    -- The first offset whose segment was committed at or after p_at: the
    -- one at v_hi qualifies; a segment that does not is skipped whole.
    WHILE p_at IS NOT NULL AND v_lo < v_hi LOOP
        v_mid := v_lo + (v_hi - v_lo) / 2;
        SELECT s.last_offset, s.committed_at INTO v_last, v_time FROM queenside.segments s
         WHERE s.partition_id = p_partition AND s.last_offset >= v_mid
         ORDER BY s.last_offset LIMIT 1;
        IF v_time >= p_at THEN
            v_hi := v_mid;
        ELSE
            v_lo := v_last + 1;
        END IF;
    END LOOP;
    RETURN (SELECT s.base_offset FROM queenside.segments s
             WHERE s.partition_id = p_partition AND s.last_offset >= v_lo
             ORDER BY s.last_offset LIMIT 1);
END;
$$;

-- head_at is the commit time of the message at p_offset, or of the first
-- retained one after it; NULL when there is none.
CREATE FUNCTION queenside.head_at(p_partition bigint, p_offset bigint) RETURNS timestamptz
LANGUAGE sql STABLE AS $$
    SELECT s.committed_at FROM queenside.segments s
     WHERE s.partition_id = p_partition AND s.last_offset >= p_offset
     ORDER BY s.last_offset LIMIT 1
$$;

-- cursor_head is the head time of a cursor about to stand at p_offset: the
-- commit time of the message there. At the end of the partition it is NULL,
-- for push to set when the next message arrives; but a push in flight on
-- the partition cannot see this cursor's move, nor this transaction its
-- messages. So first the partition's row is share-locked, without waiting:
-- taken, no push can commit before this transaction does, and a fresh look
-- is exact; not taken, a push is in flight, and the head is now, which keeps
-- the cursor in pop's view.
CREATE FUNCTION queenside.cursor_head(p_partition bigint, p_offset bigint) RETURNS timestamptz
LANGUAGE plpgsql AS $$
DECLARE
    v_at timestamptz := queenside.head_at(p_partition, p_offset);
BEGIN
    IF v_at IS NOT NULL THEN
        RETURN v_at;
    END IF;
    PERFORM 1 FROM queenside.partitions p WHERE p.id = p_partition FOR KEY SHARE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN now();
    END IF;
    RETURN queenside.head_at(p_partition, p_offset);
END;
$$;

-- pop delivers up to p_batch messages from up to p_max_partitions partitions
-- of a group, each from the group's cursor, the partition whose next message
-- has waited longest first. A partition with a live lease of the group is
-- skipped; the row lock (SKIP LOCKED) and the recheck of the lease condition
-- under it are what keep two pops from ever leasing one partition. With
-- p_auto_ack the cursor moves past what is read, in this same transaction,
-- and no lease is made.
CREATE FUNCTION queenside.pop(p_group bigint, p_partition bigint, p_max_partitions integer,
                              p_batch integer, p_lease_seconds integer, p_auto_ack boolean)
RETURNS TABLE (partition_id bigint, partition_name text, lease_id uuid, lease_from bigint, lease_to bigint,
               lease_expires_at timestamptz, head_attempts integer, seen_to bigint,
               first_offset bigint, committed_at timestamptz, message_ids uuid[], transaction_ids text[],
               payloads bytea[], trace_ids text[], headers bytea[])
LANGUAGE plpgsql AS $$
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
        -- Start at the cursor, or at the first message still retained.
        v_cur := greatest(c.cur, (SELECT s.base_offset FROM queenside.segments s
                                   WHERE s.partition_id = c.pid AND s.last_offset >= c.cur
                                   ORDER BY s.last_offset LIMIT 1));
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
        CONTINUE WHEN v_cur IS NULL OR v_last IS NULL OR v_last < v_cur;
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
    END LOOP;
END;
$$;

-- ack applies one ack call's items for one lease, in one cursor update.
-- Items name messages by offset, or by transaction id hash (resolved through
-- dedup while the hash is retained). Completed messages move the cursor over
-- the contiguous completed prefix; completions past a gap are remembered in
-- the lease. A failure clamps the cursor at the lowest failed offset of the
-- call and releases the lease; completed items above it come back rewound.
-- Each explicit failure is charged to its message's budget, and the
-- (retry_limit+1)th failure of the head message dead-letters it.
CREATE FUNCTION queenside.ack(p_group bigint, p_partition bigint, p_lease uuid,
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

    -- The cursor moves over the completed run that starts at it: among the
    -- distinct completed offsets from the cursor up, in order, the k-th is
    -- cursor+k-1 exactly as long as the run has no gap.
    SELECT c.committed + count(*) INTO v_cursor
      FROM (SELECT x, row_number() OVER (ORDER BY x) AS rn
              FROM (SELECT DISTINCT x FROM unnest(v_done) x WHERE x >= c.committed) d) r
     WHERE r.x = c.committed + r.rn - 1;

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
            FOR i IN 1 .. n LOOP
                IF v_code[i] IS NULL AND p_failed[i] AND v_off[i] = v_fail THEN
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
