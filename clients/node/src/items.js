// Building the items that push, ack and transaction send.
import { RawMsgpack } from './codec/raw.js';
import { isSingleValue } from './codec/spans.js';
import { InvalidArgumentError } from './errors.js';
import { checkKeys } from './options.js';

// The keys of a push item, and of an ack item that is not a popped message.
const PUSH_ITEM_KEYS = Object.freeze(['queue', 'partition', 'payload', 'payloadBytes', 'transactionId', 'traceId', 'headers']);
const ACK_ITEM_KEYS = Object.freeze(['leaseId', 'offset', 'transactionId', 'status', 'error']);

/**
 * The wire form of push item number index. `payload` is any JS value and
 * is encoded (null included: it is a payload); `payloadBytes` is an
 * already-encoded msgpack value, sent as it is (to forward a popped
 * message's exact bytes, for instance). An item without a queue or without
 * a payload is refused here, before anything is sent, with the
 * InvalidArgumentError the sidecar would answer; unknown keys, with a
 * TypeError naming them.
 * @param {import('../index.js').PushItem} item
 * @param {number} index
 */
export function wirePushItem(item, index) {
  const what = `push item ${index}`;
  if (item === null || typeof item !== 'object' || Array.isArray(item)) {
    throw new TypeError(`${what}: an item is an object such as {queue, payload}`);
  }
  checkKeys(what, item, PUSH_ITEM_KEYS, 'key');
  if (item.queue === undefined || item.queue === null || item.queue === '') throw refused(`${what}: queue is required`);
  const { payloadBytes, ...fields } = item;
  if (payloadBytes === undefined) {
    if (item.payload === undefined) throw refused(`${what}: payload is required`);
    return fields;
  }
  if (item.payload !== undefined) {
    throw new TypeError(`${what}: an item takes payload or payloadBytes, not both`);
  }
  // Bytes that are not exactly one msgpack value would shift every byte
  // after them and garble the whole request, so they are refused here.
  if (!(payloadBytes instanceof Uint8Array) || !isSingleValue(payloadBytes)) {
    throw new TypeError(`${what}: payloadBytes must be a Uint8Array holding exactly one msgpack value`);
  }
  return { ...fields, payload: new RawMsgpack(payloadBytes) };
}

function refused(message) {
  return new InvalidArgumentError(message, { code: 'invalid_argument', retryable: false, op: 'push' });
}

/**
 * An ack item that completes a message.
 * @param {{leaseId?: string, offset: number}} message as popped
 */
export function completed(message) {
  return { leaseId: leaseOf(message), offset: message.offset, status: 'completed' };
}

/**
 * An ack item that reports a message failed: the message and the rest of
 * its lease are delivered again, and its retry budget is charged.
 * @param {{leaseId?: string, offset: number}} message as popped
 * @param {unknown} [reason] an Error or a text, kept with a dead letter
 */
export function failed(message, reason) {
  const item = { leaseId: leaseOf(message), offset: message.offset, status: 'failed' };
  const text = reasonText(reason);
  if (text !== undefined) item.error = text;
  return item;
}

/**
 * Whether value is a message as pop returned it: ack items never carry a
 * messageId.
 */
export function isPoppedMessage(value) {
  return typeof value?.messageId === 'string';
}

/**
 * The ack item to send for what ack or transaction was given: a popped
 * message is acked completed, sent as {leaseId, offset, status} (it also
 * carries its transactionId, and the sidecar refuses an item that names
 * both); an ack item goes as it is, once its keys are checked.
 */
export function wireAckItem(item, index) {
  if (isPoppedMessage(item)) return completed(item);
  checkKeys(`ack item ${index}`, item, ACK_ITEM_KEYS, 'key');
  return item;
}

function leaseOf(message) {
  if (typeof message?.leaseId !== 'string') {
    throw new TypeError('only a leased message can be acked (it has no leaseId: popped with autoAck?)');
  }
  return message.leaseId;
}

function reasonText(reason) {
  if (reason === undefined || reason === null) return undefined;
  const text = reason instanceof Error ? reason.message || reason.name : String(reason);
  // The sidecar refuses a NUL byte in an ack error text, and refuses the
  // whole ack with it; a reason should never cost the ack.
  return text.replaceAll('\0', '\uFFFD');
}
