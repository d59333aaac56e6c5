// Deterministic transaction ids. A producer that derives an item's
// transactionId from what identifies the item (an order number, the id of
// the message that caused it) can send it again after a lost answer or a
// crash, and the sidecar answers `duplicate` instead of storing it twice.
import { createHash } from 'node:crypto';
import { encode } from './codec/encode.js';

function checkPart(part, i) {
  const t = typeof part;
  if (t === 'string' || t === 'number' || t === 'bigint' || t === 'boolean') return;
  if (part instanceof Uint8Array) return;
  throw new TypeError(`stableTransactionId: part ${i} is a ${t}; use strings, numbers, bigints, booleans or bytes`);
}

/**
 * A transaction id that depends only on parts: the first 32 hex digits of
 * the SHA-256 of the canonical msgpack encoding of the array of parts. The
 * array form keeps ("ab", "c") apart from ("a", "bc"), and the encoding
 * keeps the number 1 apart from the string "1". Any language with a
 * canonical msgpack encoder gets the same id.
 * @param {...(string|number|bigint|boolean|Uint8Array)} parts
 * @returns {string}
 */
export function stableTransactionId(...parts) {
  if (parts.length === 0) throw new TypeError('stableTransactionId needs at least one part');
  parts.forEach(checkPart);
  return createHash('sha256').update(encode(parts)).digest('hex').slice(0, 32);
}
