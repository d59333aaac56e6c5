// pushTx and ackTx: push and ack inside the application's own PostgreSQL
// transaction, through queenside's SQL API (queenside.send_batch and
// queenside.ack_message), on a node-postgres client the caller holds.
//
// A message pushed this way commits or rolls back with the caller's own
// writes (the outbox); an ack commits with the effects the consumer wrote
// (the inbox). The helpers never BEGIN, COMMIT or ROLLBACK: the items pushed
// to a queue are one statement on the caller's connection, an ack item one,
// in whatever transaction it is in. Their waits are bounded by the
// connection's own timeouts (statement_timeout...), not by the sidecar's
// --database-timeout.
// They take the items push and ack take, encode payloads with this client's
// codec (the bytes a push through the sidecar would store), and answer with
// the same results.
import { CODES } from './codes.js';
import { encode } from './codec/encode.js';
import { ERROR_CLASSES, InvalidArgumentError, QueensideError } from './errors.js';
import { wireAckItem, wirePushItem } from './items.js';
import { withTraceContext } from './tracing.js';

const DEFAULT_PARTITION = 'Default';
// The sidecar keeps at most this many bytes of an ack's error text.
const MAX_ERROR_BYTES = 4096;
const MAX_OFFSET = 2n ** 62n;

// One row of arrays, in the items' order.
const SEND_BATCH = 'SELECT array_agg(b.status ORDER BY b.n) AS statuses, array_agg(b."offset"::text ORDER BY b.n) AS offsets, '
  + 'array_agg(b.message_id::text ORDER BY b.n) AS message_ids, array_agg(b.transaction_id ORDER BY b.n) AS transaction_ids '
  + 'FROM queenside.send_batch($1, $2::bytea[], $3::text[], $4::text[], $5::jsonb[], $6::text[]) '
  + 'WITH ORDINALITY AS b (status, "offset", message_id, transaction_id, n)';
// How the SQL API names the message of a batch a refusal is about,
// counted from 1.
const MESSAGE_NUMBER = /^message ([0-9]+): /;
const ACK = 'SELECT success, code, dead_lettered FROM queenside.ack_message($1, $2::bigint, $3, $4, $5)';

// The codes queenside's SQL API refuses with, in the DETAIL of its error,
// and the SQLSTATEs it raises them with.
const REFUSAL_CODES = new Set(['invalid_argument', 'unavailable', 'unsupported']);
const REFUSAL_SQLSTATES = new Set(['22023', '55000']);
const RETRYABLE = new Set(CODES.filter((c) => c.retryable).map((c) => c.code));

const utf8 = new TextEncoder();

/**
 * Pushes items (one, or a list, as push takes them) in the transaction
 * pgClient is in: one `queenside.send_batch` statement a queue. Resolves
 * with one push result per item, in order ({index, status, queue,
 * partition, transactionId, messageId, offset}); status is queued, or
 * duplicate with the original's offset and message id.
 * @param {{query: Function}} pgClient a pg Client or PoolClient (inside BEGIN)
 * @param {import('../index.js').PushItem | import('../index.js').PushItem[]} items
 */
export async function pushTx(pgClient, items) {
  checkClient('pushTx', pgClient);
  const wire = prepare('pushTx', () => nonEmpty(withTraceContext(list(items))).map(wirePushItem));
  const byQueue = new Map();
  for (const [index, item] of wire.entries()) {
    if (!byQueue.has(item.queue)) byQueue.set(item.queue, []);
    byQueue.get(item.queue).push(index);
  }
  const results = new Array(wire.length);
  for (const [queue, indexes] of byQueue) {
    const batch = indexes.map((i) => wire[i]);
    const partitions = batch.map((item) => item.partition ?? DEFAULT_PARTITION);
    const { rows } = await run('pushTx', 'push', indexes, pgClient, SEND_BATCH, [
      queue,
      batch.map((item) => asBuffer(encode(item.payload))),
      partitions,
      orNull(batch.map((item) => item.transactionId ?? null)),
      orNull(batch.map((item) => headersJson(item.headers))),
      orNull(batch.map((item) => item.traceId ?? null)),
    ]);
    const [row] = rows;
    indexes.forEach((index, k) => {
      results[index] = {
        index,
        status: row.statuses[k],
        queue,
        partition: partitions[k],
        transactionId: row.transaction_ids[k],
        messageId: row.message_ids[k],
        offset: integer(row.offsets[k]),
      };
    });
  }
  return results;
}

// An array no item fills goes as NULL, as the SQL API's default.
function orNull(values) {
  return values.every((v) => v === null) ? null : values;
}

/**
 * Acks items (one, or a list, as ack takes them: popped messages are acked
 * completed, msg.completed(), msg.failed(reason), or {leaseId, offset |
 * transactionId, status, error}) in the transaction pgClient is in: one
 * `queenside.ack_message` statement per item, in order. Resolves with
 * {results, leases}: one result per item ({index, success, code?,
 * deadLettered?}); leases is empty. An item that did not succeed is not
 * thrown: its code says why (lease_expired...), and the caller decides
 * whether to commit.
 * @param {{query: Function}} pgClient a pg Client or PoolClient (inside BEGIN)
 * @param {import('../index.js').AckLike | import('../index.js').AckLike[]} items
 */
export async function ackTx(pgClient, items) {
  checkClient('ackTx', pgClient);
  const wire = prepare('ackTx', () => nonEmpty(list(items)).map((item, index) => checkAckItem(wireAckItem(item, index), index)));
  const results = [];
  for (const [index, item] of wire.entries()) {
    const { rows } = await run('ackTx', 'ack', [index], pgClient, ACK, [
      item.leaseId, item.offset, item.status, item.error, item.transactionId,
    ]);
    const [row] = rows;
    const result = { index, success: row.success === true };
    if (row.code !== null && row.code !== undefined) result.code = row.code;
    if (row.dead_lettered === true) result.deadLettered = true;
    results.push(result);
  }
  return { results, leases: [] };
}

function checkClient(op, pgClient) {
  if (typeof pgClient?.query !== 'function') {
    throw new TypeError(`${op}: the first argument is a node-postgres client (a pg.Client, or a PoolClient inside BEGIN)`);
  }
}

function list(value) {
  return Array.isArray(value) ? value : [value];
}

function nonEmpty(items) {
  if (items.length === 0) throw refused('items: must hold at least one item');
  return items;
}

// Items are checked, all of them, before any statement runs; a refusal
// names the helper as its operation.
function prepare(op, build) {
  try {
    return build();
  } catch (err) {
    if (err instanceof QueensideError) err.op = op;
    throw err;
  }
}


// The checks the sidecar makes of an ack item, made here so that an item
// it would refuse is refused alike, before anything is sent.
function checkAckItem(item, index) {
  const what = `ack item ${index}`;
  if (item === null || typeof item !== 'object' || Array.isArray(item)) {
    throw new TypeError(`${what}: an item is a popped message or an object such as {leaseId, offset}`);
  }
  if (typeof item.leaseId !== 'string' || item.leaseId === '') throw refused(`${what}: leaseId: is required`);
  const hasOffset = item.offset !== undefined && item.offset !== null;
  const hasId = item.transactionId !== undefined && item.transactionId !== null;
  if (hasOffset === hasId) throw refused(`${what}: name the message by exactly one of offset and transactionId`);
  if (hasOffset && !isOffset(item.offset)) throw refused(`${what}: offset: must be an integer 0..2^62`);
  if (hasId && (typeof item.transactionId !== 'string' || item.transactionId === '')) {
    throw refused(`${what}: transactionId: must be a string of 1..256 bytes`);
  }
  const status = item.status ?? 'completed';
  if (status !== 'completed' && status !== 'failed') {
    throw refused(`${what}: status: ${JSON.stringify(status)}: want completed or failed`);
  }
  let error = item.error ?? null;
  if (error !== null) {
    if (typeof error !== 'string') throw refused(`${what}: error: must be a string`);
    if (error.includes('\0')) throw refused(`${what}: error: contains a NUL character`);
    error = truncate(error);
  }
  return {
    leaseId: item.leaseId,
    offset: hasOffset ? String(item.offset) : null,
    transactionId: hasId ? item.transactionId : null,
    status,
    error,
  };
}

function isOffset(value) {
  if (typeof value === 'number') return Number.isSafeInteger(value) && value >= 0;
  return typeof value === 'bigint' && value >= 0n && value <= MAX_OFFSET;
}

// As the sidecar keeps an ack's error: its first 4096 bytes, whole
// characters only.
function truncate(text) {
  const bytes = utf8.encode(text);
  if (bytes.length <= MAX_ERROR_BYTES) return text;
  let n = MAX_ERROR_BYTES;
  while (n > 0 && (bytes[n] & 0xc0) === 0x80) n--;
  return new TextDecoder().decode(bytes.subarray(0, n));
}

function refused(message) {
  return new InvalidArgumentError(message, { code: 'invalid_argument', retryable: false });
}

function asBuffer(bytes) {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

// Headers go as a JSON object (a Map becomes one); none, or an empty one,
// as NULL. queenside.send_batch refuses what is not an object of strings.
function headersJson(headers) {
  if (headers === undefined || headers === null) return null;
  const object = headers instanceof Map ? Object.fromEntries(headers) : headers;
  return JSON.stringify(object);
}

// An offset as the socket's results give it: a number, or a bigint beyond
// 2^53.
function integer(text) {
  if (text === null || text === undefined) return undefined;
  const n = Number(text);
  return Number.isSafeInteger(n) ? n : BigInt(text);
}

/**
 * Runs one statement; a refusal of queenside's SQL API (the protocol's
 * code in the error's DETAIL) becomes the client's error class of that
 * code, the PostgreSQL error as its cause, naming the item it is about as
 * push and ack name it (indexes: the statement's items). Any other error
 * propagates as it is.
 */
async function run(op, kind, indexes, pgClient, text, values) {
  try {
    return await pgClient.query(text, values);
  } catch (err) {
    const code = err?.detail;
    if (!REFUSAL_CODES.has(code) || !REFUSAL_SQLSTATES.has(err?.code)) throw err;
    let reason = String(err.message ?? code).replace(/^queenside: /, '');
    let what = kind;
    const number = MESSAGE_NUMBER.exec(reason);
    if (number && Number(number[1]) >= 1 && Number(number[1]) <= indexes.length) {
      what = `${kind} item ${indexes[Number(number[1]) - 1]}`;
      reason = reason.slice(number[0].length);
    } else if (indexes.length === 1) {
      what = `${kind} item ${indexes[0]}`;
    }
    throw new ERROR_CLASSES[code](`${what}: ${reason}`, { code, retryable: RETRYABLE.has(code), op, cause: err });
  }
}
