-- queenside storage, version 1.
--
-- Messages are stored in segments: one row per push batch per partition,
-- holding every message of the batch in parallel arrays. PostgreSQL writes one
-- heap row and one index entry per batch instead of per message, which is what
-- lets a 2-core machine push 100k messages a second. The 128-bit hashes of the
-- transaction ids live beside them in dedup, one row per message, so that the
-- duplicate probe is exact.

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
CREATE TABLE queenside.dedup (
    partition_id bigint      NOT NULL,
    hash         uuid        NOT NULL,
    msg_offset   bigint      NOT NULL,
    message_id   uuid        NOT NULL,
    committed_at timestamptz NOT NULL,
    PRIMARY KEY (partition_id, hash)
);

-- push stores one batch of messages in one partition, in array order, and
-- reports a verdict per input position. Inside the partition row lock it
-- probes the stored hashes within the queue's window, then allocates offsets
-- only for messages that are neither stored duplicates nor repeats of an
-- earlier item of the same batch (first wins). A duplicate writes nothing.
CREATE FUNCTION queenside.push(
    p_partition       bigint,
    p_hashes          uuid[],
    p_message_ids     uuid[],
    p_transaction_ids text[],
    p_payloads        bytea[],
    p_trace_ids       text[],
    p_headers         bytea[]
) RETURNS TABLE (idx integer, duplicate boolean, msg_offset bigint, message_id uuid, committed_at timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    v_next   bigint;
    v_last   timestamptz;
    v_window integer;
    v_at     timestamptz;
BEGIN
    SELECT p.next_offset, p.last_committed_at, q.dedup_window_seconds
      INTO v_next, v_last, v_window
      FROM queenside.partitions p
      JOIN queenside.queues q ON q.id = p.queue_id
     WHERE p.id = p_partition
       FOR UPDATE OF p;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'queenside: partition % does not exist', p_partition
            USING ERRCODE = 'no_data_found';
    END IF;
    -- Read the clock only once the lock is held, and never behind the last
    -- commit, so commit times never decrease with offset.
    v_at := greatest(clock_timestamp(), v_last);

    RETURN QUERY
    WITH input AS (
        SELECT t.ord::integer AS idx, t.hash, t.mid, t.txid, t.payload, t.trace, t.hdr
          FROM unnest(p_hashes, p_message_ids, p_transaction_ids, p_payloads, p_trace_ids, p_headers)
               WITH ORDINALITY AS t (hash, mid, txid, payload, trace, hdr, ord)
    ), stored AS (
        SELECT d.hash, d.msg_offset, d.message_id, d.committed_at
          FROM queenside.dedup d
         WHERE v_window > 0
           AND d.partition_id = p_partition
           AND d.hash = ANY (p_hashes)
           AND d.committed_at > v_at - make_interval(secs => v_window)
    ), judged AS (
        SELECT i.*,
               s.hash IS NOT NULL AS is_stored,
               s.msg_offset AS s_offset, s.message_id AS s_mid, s.committed_at AS s_at,
               CASE WHEN v_window > 0 THEN min(i.idx) OVER (PARTITION BY i.hash) ELSE i.idx END AS leader
          FROM input i
          LEFT JOIN stored s ON s.hash = i.hash
    ), fresh AS (
        SELECT j.idx, j.hash, j.mid, j.txid, j.payload, j.trace, j.hdr,
               v_next + row_number() OVER (ORDER BY j.idx) - 1 AS off
          FROM judged j
         WHERE NOT j.is_stored AND j.leader = j.idx
    ), seg AS (
        INSERT INTO queenside.segments (partition_id, last_offset, base_offset, committed_at,
                                        message_ids, transaction_ids, payloads, trace_ids, headers)
        SELECT p_partition, max(f.off), min(f.off), v_at,
               array_agg(f.mid ORDER BY f.off),
               array_agg(f.txid ORDER BY f.off),
               array_agg(f.payload ORDER BY f.off),
               CASE WHEN bool_or(f.trace IS NOT NULL) THEN array_agg(f.trace ORDER BY f.off) END,
               CASE WHEN bool_or(f.hdr IS NOT NULL) THEN array_agg(f.hdr ORDER BY f.off) END
          FROM fresh f
        HAVING count(*) > 0
    ), hashes AS (
        -- Outside the window (or with deduplication off) a repeat is a new
        -- message, and the hash now names it.
        INSERT INTO queenside.dedup AS d (partition_id, hash, msg_offset, message_id, committed_at)
        SELECT DISTINCT ON (f.hash) p_partition, f.hash, f.off, f.mid, v_at
          FROM fresh f
         ORDER BY f.hash, f.off DESC
        ON CONFLICT (partition_id, hash) DO UPDATE
           SET msg_offset = excluded.msg_offset,
               message_id = excluded.message_id,
               committed_at = excluded.committed_at
    ), advance AS (
        UPDATE queenside.partitions p
           SET next_offset = v_next + (SELECT count(*) FROM fresh),
               last_committed_at = v_at
         WHERE p.id = p_partition AND EXISTS (SELECT 1 FROM fresh)
    )
    SELECT j.idx,
           f.idx IS NULL,
           CASE WHEN j.is_stored THEN j.s_offset ELSE coalesce(f.off, l.off) END,
           CASE WHEN j.is_stored THEN j.s_mid ELSE coalesce(f.mid, l.mid) END,
           CASE WHEN j.is_stored THEN j.s_at ELSE v_at END
      FROM judged j
      LEFT JOIN fresh f ON f.idx = j.idx
      LEFT JOIN fresh l ON l.idx = j.leader
     ORDER BY j.idx;
END;
$$;

-- ensure_partition returns the id of a partition, creating it and its queue
-- (with default options) on first use. Each statement sees rows committed by
-- concurrent callers, so racing first pushes agree on one id.
CREATE FUNCTION queenside.ensure_partition(p_queue text, p_partition text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_id bigint;
BEGIN
    LOOP
        SELECT p.id INTO v_id
          FROM queenside.partitions p
          JOIN queenside.queues q ON q.id = p.queue_id
         WHERE q.name = p_queue AND p.name = p_partition;
        IF FOUND THEN
            RETURN v_id;
        END IF;
        INSERT INTO queenside.queues (name) VALUES (p_queue) ON CONFLICT (name) DO NOTHING;
        INSERT INTO queenside.partitions (queue_id, name)
             SELECT q.id, p_partition FROM queenside.queues q WHERE q.name = p_queue
        ON CONFLICT (queue_id, name) DO NOTHING;
    END LOOP;
END;
$$;
