-- queenside storage, version 14: pushes and acks inside the application's
-- own transaction.
--
-- A push through the sidecar commits in a transaction of its own, so an
-- application that writes a row and announces it had two writes that could
-- part (the dual-write problem). These functions are the SQL API an
-- application calls on its own connection, in its own transaction:
--
--   queenside.send(queue, payload bytea, partition, transaction_id, headers, trace_id)
--   queenside.send_json(queue, payload jsonb, partition, transaction_id, headers, trace_id)
--   queenside.ack_message(lease_id, offset, status, error, transaction_id)
--
-- A message sent commits or rolls back with the caller's transaction (the
-- outbox); an ack does too, with the effects the consumer wrote (the
-- inbox). They go through queenside.push and queenside.ack, the sidecar's
-- own calls, so every guarantee of a partition holds: offsets gapless and
-- in commit order, deduplication exact against pushes through any sidecar,
-- the retry budget and the dead letters. A rolled-back send leaves neither
-- message nor gap: the partition's offset moved only inside the
-- transaction. The cost is the partition's row lock, held from the send to
-- the end of the caller's transaction: other pushes to that partition wait
-- until then, so a send belongs just before COMMIT.
--
-- A refusal is an error whose DETAIL is the protocol's code
-- (invalid_argument, unavailable, unsupported), with SQLSTATE 22023
-- (invalid_parameter_value) for invalid_argument and 55000
-- (object_not_in_prerequisite_state) for the others.
--
-- These functions are the API applications use, and are kept across
-- releases as the sidecar's calls are (schema/migrate.go, the upgrade rule).

-- msgpack encodes a JSON value as the clients encode the same value: an
-- integral number in the smallest integer form that holds it (up to 64
-- bits), any other number as a 64-bit float, strings as UTF-8 str, arrays
-- and objects as arrays and maps.
CREATE FUNCTION queenside.msgpack(p_value jsonb)
RETURNS bytea
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE STRICT
AS $$
DECLARE
    v_num numeric;
    v_out bytea;
    v_n   integer;
    r     record;
BEGIN
    CASE jsonb_typeof(p_value)
    WHEN 'null' THEN
        RETURN '\xc0'::bytea;
    WHEN 'boolean' THEN
        RETURN CASE WHEN p_value::boolean THEN '\xc3'::bytea ELSE '\xc2'::bytea END;
    WHEN 'number' THEN
        v_num := p_value::numeric;
        IF v_num <> trunc(v_num) OR v_num < -9223372036854775808 OR v_num > 18446744073709551615 THEN
            RETURN '\xcb'::bytea || float8send(v_num::float8);
        ELSIF v_num >= 0 AND v_num <= 127 THEN
            RETURN substr(int2send(v_num::smallint), 2);
        ELSIF v_num >= -32 AND v_num < 0 THEN
            RETURN substr(int2send(v_num::smallint), 2);
        ELSIF v_num > 9223372036854775807 THEN
            RETURN '\xcf'::bytea || int8send((v_num - 18446744073709551616)::bigint);
        ELSIF v_num >= 0 THEN
            RETURN CASE WHEN v_num < 256 THEN '\xcc'::bytea || substr(int2send(v_num::smallint), 2)
                        WHEN v_num < 65536 THEN '\xcd'::bytea || substr(int4send(v_num::integer), 3)
                        WHEN v_num < 4294967296 THEN '\xce'::bytea || substr(int8send(v_num::bigint), 5)
                        ELSE '\xcf'::bytea || int8send(v_num::bigint) END;
        ELSE
            RETURN CASE WHEN v_num >= -128 THEN '\xd0'::bytea || substr(int2send(v_num::smallint), 2)
                        WHEN v_num >= -32768 THEN '\xd1'::bytea || int2send(v_num::smallint)
                        WHEN v_num >= -2147483648 THEN '\xd2'::bytea || int4send(v_num::integer)
                        ELSE '\xd3'::bytea || int8send(v_num::bigint) END;
        END IF;
    WHEN 'string' THEN
        v_out := convert_to(p_value #>> '{}', 'UTF8');
        v_n := length(v_out);
        RETURN CASE WHEN v_n < 32 THEN set_byte('\x00'::bytea, 0, 160 + v_n)
                    WHEN v_n < 256 THEN '\xd9'::bytea || substr(int2send(v_n::smallint), 2)
                    WHEN v_n < 65536 THEN '\xda'::bytea || substr(int4send(v_n), 3)
                    ELSE '\xdb'::bytea || int4send(v_n) END || v_out;
    WHEN 'array' THEN
        v_n := jsonb_array_length(p_value);
        v_out := CASE WHEN v_n < 16 THEN set_byte('\x00'::bytea, 0, 144 + v_n)
                      WHEN v_n < 65536 THEN '\xdc'::bytea || substr(int4send(v_n), 3)
                      ELSE '\xdd'::bytea || int4send(v_n) END;
        FOR r IN SELECT e FROM jsonb_array_elements(p_value) WITH ORDINALITY AS a (e, o) ORDER BY a.o LOOP
            v_out := v_out || queenside.msgpack(r.e);
        END LOOP;
        RETURN v_out;
    ELSE -- object
        SELECT count(*) INTO v_n FROM jsonb_object_keys(p_value);
        v_out := CASE WHEN v_n < 16 THEN set_byte('\x00'::bytea, 0, 128 + v_n)
                      WHEN v_n < 65536 THEN '\xde'::bytea || substr(int4send(v_n), 3)
                      ELSE '\xdf'::bytea || int4send(v_n) END;
        FOR r IN SELECT k, v FROM jsonb_each(p_value) AS e (k, v) ORDER BY k LOOP
            v_out := v_out || queenside.msgpack(to_jsonb(r.k)) || queenside.msgpack(r.v);
        END LOOP;
        RETURN v_out;
    END CASE;
END;
$$;

-- refuse raises a refusal: the protocol's code in the DETAIL.
CREATE FUNCTION queenside.refuse(p_code text, p_message text)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    RAISE EXCEPTION 'queenside: %', p_message
        USING DETAIL = p_code,
              ERRCODE = CASE WHEN p_code = 'invalid_argument' THEN '22023' ELSE '55000' END;
END;
$$;

-- send stores one message in the caller's transaction and answers as the
-- protocol's push does: status queued with its offset and message id, or
-- duplicate with the original's. The queue and the partition are created
-- as a push through a sidecar creates them.
CREATE FUNCTION queenside.send(p_queue text, p_payload bytea, p_partition text DEFAULT 'Default',
                               p_transaction_id text DEFAULT NULL, p_headers jsonb DEFAULT NULL,
                               p_trace_id text DEFAULT NULL,
                               OUT status text, OUT "offset" bigint, OUT message_id uuid, OUT transaction_id text)
RETURNS record
LANGUAGE plpgsql
AS $$
DECLARE
    v_encrypted boolean;
    v_partition bigint;
    v_headers   bytea;
    v_ms        bigint;
    v_id        bytea;
    r           record;
BEGIN
    -- The sidecar's rules (protocol/values.go), for what a caller of SQL
    -- can get wrong.
    IF p_queue IS NULL OR p_queue !~ '^[A-Za-z0-9._:-]{1,200}$' THEN
        PERFORM queenside.refuse('invalid_argument', format('queue %L must be 1..200 characters of [A-Za-z0-9._:-]', p_queue));
    END IF;
    IF p_payload IS NULL THEN
        PERFORM queenside.refuse('invalid_argument', 'payload is required (msgpack nil, ''\xc0'', is a payload)');
    END IF;
    IF p_partition IS NULL OR octet_length(p_partition) NOT BETWEEN 1 AND 200 OR p_partition ~ '[[:cntrl:]]' THEN
        PERFORM queenside.refuse('invalid_argument', format('partition %L must be 1..200 bytes without control characters', p_partition));
    END IF;
    IF octet_length(p_transaction_id) NOT BETWEEN 1 AND 256 THEN
        PERFORM queenside.refuse('invalid_argument', 'transaction_id must be 1..256 bytes');
    END IF;
    IF octet_length(p_trace_id) NOT BETWEEN 1 AND 256 THEN
        PERFORM queenside.refuse('invalid_argument', 'trace_id must be 1..256 bytes');
    END IF;
    IF p_headers IS NOT NULL THEN
        IF jsonb_typeof(p_headers) <> 'object' OR
           EXISTS (SELECT 1 FROM jsonb_each(p_headers) AS e (k, v) WHERE jsonb_typeof(e.v) <> 'string') THEN
            PERFORM queenside.refuse('invalid_argument', 'headers must be a JSON object of strings');
        END IF;
        IF (SELECT count(*) FROM jsonb_object_keys(p_headers)) > 64 THEN
            PERFORM queenside.refuse('invalid_argument', 'headers: at most 64 entries');
        END IF;
        IF p_headers <> '{}'::jsonb THEN
            v_headers := queenside.msgpack(p_headers);
        END IF;
    END IF;
    -- A sidecar spools its pushes during push maintenance; a transaction
    -- cannot wait for it to end.
    IF (SELECT m.push FROM queenside.maintenance m) THEN
        PERFORM queenside.refuse('unavailable', 'pushes are paused for maintenance; try again once it ends');
    END IF;
    -- Sealed payloads are sealed by the sidecars, which hold the keys.
    SELECT q.encrypt_payloads INTO v_encrypted FROM queenside.queues q WHERE q.name = p_queue;
    IF v_encrypted THEN
        PERFORM queenside.refuse('unsupported', format('queue %s stores sealed payloads, which only a sidecar can seal: push through a sidecar', p_queue));
    END IF;

    SELECT e.o_id INTO v_partition FROM queenside.ensure_partitions(p_queue, ARRAY[p_partition]) e;
    -- A version 7 UUID, as the sidecar's: 48 bits of Unix milliseconds,
    -- then random bits, with the version and variant set.
    v_ms := floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint;
    v_id := overlay(uuid_send(gen_random_uuid()) PLACING substr(int8send(v_ms), 3) FROM 1 FOR 6);
    v_id := set_byte(v_id, 6, (get_byte(v_id, 6) & 15) | 112);
    message_id := encode(v_id, 'hex')::uuid;
    transaction_id := coalesce(p_transaction_id, gen_random_uuid()::text);

    SELECT * INTO r FROM queenside.push(NULL::bigint, ARRAY[v_partition], ARRAY[1], ARRAY[1], ARRAY[1],
                                        ARRAY[queenside.transaction_hash(transaction_id)], NULL::integer[],
                                        ARRAY[message_id], ARRAY[transaction_id], ARRAY[p_payload],
                                        CASE WHEN p_trace_id IS NOT NULL THEN ARRAY[p_trace_id] END,
                                        CASE WHEN v_headers IS NOT NULL THEN ARRAY[v_headers] END);
    IF r.dup_positions IS NOT NULL AND 1 = ANY (r.dup_positions) THEN
        status := 'duplicate';
        "offset" := r.dup_offsets[1];
        message_id := r.dup_message_ids[1];
    ELSE
        status := 'queued';
        "offset" := r.bases[1];
    END IF;
END;
$$;

-- send_json is send with a JSON payload, stored as msgpack, as a client
-- would push the same value.
CREATE FUNCTION queenside.send_json(p_queue text, p_payload jsonb, p_partition text DEFAULT 'Default',
                                    p_transaction_id text DEFAULT NULL, p_headers jsonb DEFAULT NULL,
                                    p_trace_id text DEFAULT NULL,
                                    OUT status text, OUT "offset" bigint, OUT message_id uuid, OUT transaction_id text)
RETURNS record
LANGUAGE sql
AS $$
    SELECT * FROM queenside.send(p_queue, queenside.msgpack(p_payload), p_partition, p_transaction_id, p_headers,
                                 p_trace_id)
$$;

-- ack_message acks one message of a lease in the caller's transaction,
-- named by its offset or, with a NULL offset, by its transaction id, with
-- ack's semantics (PROTOCOL.md, ack): completed moves the cursor, failed
-- rewinds it and charges the retry budget, and a rollback leaves the lease
-- as it was. It answers as an ack item's result.
CREATE FUNCTION queenside.ack_message(p_lease_id text, p_offset bigint, p_status text DEFAULT 'completed',
                                      p_error text DEFAULT NULL, p_transaction_id text DEFAULT NULL,
                                      OUT success boolean, OUT code text, OUT dead_lettered boolean)
RETURNS record
LANGUAGE plpgsql
AS $$
DECLARE
    v_parts text[] := string_to_array(p_lease_id, '.');
    r       record;
BEGIN
    IF p_status IS NULL OR p_status NOT IN ('completed', 'failed') THEN
        PERFORM queenside.refuse('invalid_argument', format('status %L must be completed or failed', p_status));
    END IF;
    IF (p_offset IS NULL) = (p_transaction_id IS NULL) THEN
        PERFORM queenside.refuse('invalid_argument', 'give the offset or the transaction id, not both');
    END IF;
    IF octet_length(p_error) > 4096 THEN
        PERFORM queenside.refuse('invalid_argument', 'error must be at most 4096 bytes');
    END IF;
    -- A lease id is group.partition.uuid (store/leaseid.go); one that is
    -- not names no live lease.
    IF cardinality(v_parts) IS DISTINCT FROM 3 OR v_parts[1] !~ '^[0-9]{1,18}$' OR v_parts[2] !~ '^[0-9]{1,18}$'
       OR v_parts[3] !~ '^[0-9a-f]{32}$' THEN
        success := false;
        code := 'lease_expired';
        dead_lettered := false;
        RETURN;
    END IF;
    SELECT * INTO r FROM queenside.ack(v_parts[1]::bigint, v_parts[2]::bigint, v_parts[3]::uuid, ARRAY[p_offset],
                                       CASE WHEN p_offset IS NULL THEN ARRAY[queenside.transaction_hash(p_transaction_id)] END,
                                       ARRAY[p_status = 'failed'], ARRAY[p_error], true);
    success := r.success;
    code := r.code;
    dead_lettered := r.dead_lettered;
END;
$$;
