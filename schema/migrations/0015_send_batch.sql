-- queenside storage, version 15: many messages sent in one call, and no
-- message larger than a sidecar can deliver.
--
--   queenside.send_batch(queue, payloads bytea[], partitions, transaction_ids, headers, trace_ids)
--   queenside.send_json_batch(queue, payloads jsonb[], partitions, transaction_ids, headers, trace_ids)
--
-- A send of one message is a queenside.push of its own: a partition row
-- version, a segment row and a dedup row each. An outbox that announces a
-- hundred rows paid that a hundred times. A batch makes one push a
-- partition, whose messages share one partition update and one segment
-- row, as a sidecar's batched push does. queenside.send is now a batch of
-- one, so both follow one rule.
--
-- A batch pushes its partitions one call each, in id order: each call is
-- on one partition (one shard on Citus, where a call on several would not
-- plan), and two batches lock the partitions they share in the same order,
-- so they cannot deadlock on each other.

-- send_max_message_bytes is the largest payload and headers a send
-- stores: what a sidecar with the default frame limit (16 MiB,
-- --max-frame-bytes) delivers in a pop's answer, with room for the rest of
-- that answer. A sidecar refuses a larger push item, which no frame
-- carries; a message stored larger could not be popped until the limit
-- was raised on every sidecar.
CREATE FUNCTION queenside.send_max_message_bytes()
RETURNS integer
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
AS $$ SELECT 16 * 1024 * 1024 - 4096 $$;

-- send_batch stores the messages p_payloads in the caller's transaction
-- and answers a row each, in their order, as the protocol's push does:
-- status queued with its offset and message id, or duplicate with the
-- original's (a repeat of a transaction id inside the batch is a duplicate
-- of the first). p_partitions, p_transaction_ids, p_headers and
-- p_trace_ids are NULL or hold an element a message (an element NULL for
-- 'Default', a transaction id made up, or none).
CREATE FUNCTION queenside.send_batch(p_queue text, p_payloads bytea[], p_partitions text[] DEFAULT NULL,
                                     p_transaction_ids text[] DEFAULT NULL, p_headers jsonb[] DEFAULT NULL,
                                     p_trace_ids text[] DEFAULT NULL)
RETURNS TABLE (status text, "offset" bigint, message_id uuid, transaction_id text)
LANGUAGE plpgsql
AS $$
DECLARE
    n              integer := coalesce(cardinality(p_payloads), 0);
    v_names        text[];
    v_txids        text[];
    v_hashes       uuid[];
    v_mids         uuid[];
    v_headers      bytea[];
    v_status       text[];
    v_offsets      bigint[];
    v_ms           bigint;
    v_id           bytea;
    v_h            jsonb;
    v_encrypted    boolean;
    m              integer[]; -- a partition's messages, as indexes into p_payloads
    v_p_txids      text[];    -- a partition's messages' transaction ids,
    v_p_hashes     uuid[];    -- their hashes,
    v_p_mids       uuid[];    -- message ids,
    v_p_payloads   bytea[];   -- payloads,
    v_traces       text[];    -- trace ids
    v_part_headers bytea[];   -- and headers, in order
    v_leaders      integer[];
    v_dup          integer;
    v_next         bigint;
    i              integer;
    j              integer;
    part           record;
    r              record;
BEGIN
    -- The sidecar's rules (protocol/values.go), for what a caller of SQL
    -- can get wrong.
    IF p_queue IS NULL OR p_queue !~ '^[A-Za-z0-9._:-]{1,200}$' THEN
        PERFORM queenside.refuse('invalid_argument', format('queue %L must be 1..200 characters of [A-Za-z0-9._:-]', p_queue));
    END IF;
    IF n NOT BETWEEN 1 AND 10000 THEN
        PERFORM queenside.refuse('invalid_argument', format('a batch holds 1..10000 messages, not %s', n));
    END IF;
    IF cardinality(p_partitions) <> n OR cardinality(p_transaction_ids) <> n OR cardinality(p_headers) <> n
       OR cardinality(p_trace_ids) <> n THEN
        PERFORM queenside.refuse('invalid_argument',
                                 format('partitions, transaction ids, headers and trace ids are NULL or hold %s elements, one a payload', n));
    END IF;
    v_names := array_fill('Default'::text, ARRAY[n]);
    v_txids := array_fill(NULL::text, ARRAY[n]);
    v_headers := array_fill(NULL::bytea, ARRAY[n]);
    v_hashes := array_fill(NULL::uuid, ARRAY[n]);
    FOR i IN 1 .. n LOOP
        IF p_payloads[i] IS NULL THEN
            PERFORM queenside.refuse('invalid_argument', format('message %s: payload is required (msgpack nil, ''\xc0'', is a payload)', i));
        END IF;
        v_names[i] := coalesce(p_partitions[i], 'Default');
        IF octet_length(v_names[i]) NOT BETWEEN 1 AND 200 OR v_names[i] ~ '[[:cntrl:]]' THEN
            PERFORM queenside.refuse('invalid_argument', format('message %s: partition %L must be 1..200 bytes without control characters', i, v_names[i]));
        END IF;
        IF octet_length(p_transaction_ids[i]) NOT BETWEEN 1 AND 256 THEN
            PERFORM queenside.refuse('invalid_argument', format('message %s: transaction_id must be 1..256 bytes', i));
        END IF;
        v_txids[i] := coalesce(p_transaction_ids[i], gen_random_uuid()::text);
        v_hashes[i] := queenside.transaction_hash(v_txids[i]);
        IF octet_length(p_trace_ids[i]) NOT BETWEEN 1 AND 256 THEN
            PERFORM queenside.refuse('invalid_argument', format('message %s: trace_id must be 1..256 bytes', i));
        END IF;
        v_h := p_headers[i];
        IF v_h IS NOT NULL THEN
            IF jsonb_typeof(v_h) <> 'object' OR
               EXISTS (SELECT 1 FROM jsonb_each(v_h) AS e (k, v) WHERE jsonb_typeof(e.v) <> 'string') THEN
                PERFORM queenside.refuse('invalid_argument', format('message %s: headers must be a JSON object of strings', i));
            END IF;
            IF (SELECT count(*) FROM jsonb_object_keys(v_h)) > 64 THEN
                PERFORM queenside.refuse('invalid_argument', format('message %s: headers: at most 64 entries', i));
            END IF;
            IF v_h <> '{}'::jsonb THEN
                v_headers[i] := queenside.msgpack(v_h);
            END IF;
        END IF;
        IF octet_length(p_payloads[i]) + coalesce(octet_length(v_headers[i]), 0) > queenside.send_max_message_bytes() THEN
            PERFORM queenside.refuse('invalid_argument',
                format('message %s: %s bytes of payload and headers is more than %s, the most a sidecar with the default frame limit (--max-frame-bytes) delivers',
                       i, octet_length(p_payloads[i]) + coalesce(octet_length(v_headers[i]), 0), queenside.send_max_message_bytes()));
        END IF;
    END LOOP;
    -- A sidecar spools its pushes during push maintenance; a transaction
    -- cannot wait for it to end.
    IF (SELECT mt.push FROM queenside.maintenance mt) THEN
        PERFORM queenside.refuse('unavailable', 'pushes are paused for maintenance; try again once it ends');
    END IF;
    -- Sealed payloads are sealed by the sidecars, which hold the keys.
    SELECT q.encrypt_payloads INTO v_encrypted FROM queenside.queues q WHERE q.name = p_queue;
    IF v_encrypted THEN
        PERFORM queenside.refuse('unsupported', format('queue %s stores sealed payloads, which only a sidecar can seal: push through a sidecar', p_queue));
    END IF;

    -- Version 7 UUIDs, as the sidecar's: 48 bits of Unix milliseconds,
    -- then random bits, with the version and variant set.
    v_ms := floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint;
    v_mids := array_fill(NULL::uuid, ARRAY[n]);
    FOR i IN 1 .. n LOOP
        v_id := overlay(uuid_send(gen_random_uuid()) PLACING substr(int8send(v_ms), 3) FROM 1 FOR 6);
        v_id := set_byte(v_id, 6, (get_byte(v_id, 6) & 15) | 112);
        v_mids[i] := encode(v_id, 'hex')::uuid;
    END LOOP;

    v_status := array_fill(NULL::text, ARRAY[n]);
    v_offsets := array_fill(NULL::bigint, ARRAY[n]);
    FOR part IN
        SELECT e.o_id AS id, array_agg(u.i ORDER BY u.i) AS msgs
          FROM unnest(v_names) WITH ORDINALITY AS u (name, i)
          JOIN queenside.ensure_partitions(p_queue, ARRAY(SELECT DISTINCT x FROM unnest(v_names) AS x)) e
            ON e.o_name = u.name
         GROUP BY e.o_id
         ORDER BY e.o_id
    LOOP
        m := part.msgs;
        IF cardinality(m) = n THEN -- the whole batch: its arrays as they are
            v_p_txids := v_txids;
            v_p_hashes := v_hashes;
            v_p_mids := v_mids;
            v_p_payloads := p_payloads;
            v_traces := p_trace_ids;
            v_part_headers := v_headers;
        ELSE
            SELECT array_agg(v_txids[x] ORDER BY o), array_agg(v_hashes[x] ORDER BY o), array_agg(v_mids[x] ORDER BY o),
                   array_agg(p_payloads[x] ORDER BY o), array_agg(p_trace_ids[x] ORDER BY o), array_agg(v_headers[x] ORDER BY o)
              INTO v_p_txids, v_p_hashes, v_p_mids, v_p_payloads, v_traces, v_part_headers
              FROM unnest(m) WITH ORDINALITY AS u (x, o);
        END IF;
        IF cardinality(array_remove(v_traces, NULL)) = 0 THEN
            v_traces := NULL; -- none, as a sidecar passes none
        END IF;
        IF cardinality(array_remove(v_part_headers, NULL)) = 0 THEN
            v_part_headers := NULL;
        END IF;
        -- queenside.push's leaders: a message's first position in the call
        -- with the same transaction id; NULL when none repeats.
        v_leaders := NULL;
        IF cardinality(m) > 1 THEN
            IF (SELECT count(DISTINCT t) FROM unnest(v_p_txids) AS t) < cardinality(m) THEN
                v_leaders := ARRAY(SELECT min(k) OVER (PARTITION BY v_p_txids[k]) FROM generate_subscripts(m, 1) AS k ORDER BY k);
            END IF;
        END IF;
        SELECT * INTO r
          FROM queenside.push(NULL::bigint, ARRAY[part.id], ARRAY[1], ARRAY[cardinality(m)], array_fill(1, ARRAY[cardinality(m)]),
                              v_p_hashes, v_leaders, v_p_mids, v_p_txids, v_p_payloads, v_traces, v_part_headers);
        -- Outcomes as the sidecar's (store/push.go, pushCall.outcomes):
        -- with deduplication on, a repeat is a duplicate of its leader's
        -- outcome and a message stored already of its original; every
        -- other message took the partition's next offset, in order.
        v_next := r.bases[1];
        FOR j IN 1 .. cardinality(m) LOOP
            i := m[j];
            v_dup := array_position(r.dup_positions, j);
            IF r.dedup_on[1] AND v_leaders IS NOT NULL AND v_leaders[j] <> j THEN
                v_status[i] := 'duplicate';
                v_offsets[i] := v_offsets[m[v_leaders[j]]];
                v_mids[i] := v_mids[m[v_leaders[j]]];
            ELSIF r.dedup_on[1] AND v_dup IS NOT NULL THEN
                v_status[i] := 'duplicate';
                v_offsets[i] := r.dup_offsets[v_dup];
                v_mids[i] := r.dup_message_ids[v_dup];
            ELSE
                v_status[i] := 'queued';
                v_offsets[i] := v_next;
                v_next := v_next + 1;
            END IF;
        END LOOP;
    END LOOP;
    RETURN QUERY SELECT v_status[k], v_offsets[k], v_mids[k], v_txids[k] FROM generate_series(1, n) AS k ORDER BY k;
END;
$$;

-- send_json_batch is send_batch with JSON payloads, stored as msgpack, as
-- a client would push the same values.
CREATE FUNCTION queenside.send_json_batch(p_queue text, p_payloads jsonb[], p_partitions text[] DEFAULT NULL,
                                          p_transaction_ids text[] DEFAULT NULL, p_headers jsonb[] DEFAULT NULL,
                                          p_trace_ids text[] DEFAULT NULL)
RETURNS TABLE (status text, "offset" bigint, message_id uuid, transaction_id text)
LANGUAGE sql
AS $$
    SELECT * FROM queenside.send_batch(p_queue,
                                       ARRAY(SELECT queenside.msgpack(v) FROM unnest(p_payloads) WITH ORDINALITY AS u (v, o) ORDER BY o),
                                       p_partitions, p_transaction_ids, p_headers, p_trace_ids)
$$;

-- send is a batch of one.
CREATE OR REPLACE FUNCTION queenside.send(p_queue text, p_payload bytea, p_partition text DEFAULT 'Default',
                                          p_transaction_id text DEFAULT NULL, p_headers jsonb DEFAULT NULL,
                                          p_trace_id text DEFAULT NULL,
                                          OUT status text, OUT "offset" bigint, OUT message_id uuid, OUT transaction_id text)
RETURNS record
LANGUAGE plpgsql
AS $$
BEGIN
    SELECT b.status, b."offset", b.message_id, b.transaction_id INTO status, "offset", message_id, transaction_id
      FROM queenside.send_batch(p_queue, ARRAY[p_payload], ARRAY[p_partition], ARRAY[p_transaction_id],
                                ARRAY[p_headers], ARRAY[p_trace_id]) b;
END;
$$;
