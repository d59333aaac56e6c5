// Deterministic transaction ids. A producer that derives an item's
// transactionId from what identifies the item (an order number, the id of
// the message that caused it) can send it again after a lost answer or a
// crash, and the sidecar answers `duplicate` instead of storing it twice.
// The Go and Python clients compute the same ids (clients/testdata/cases.json
// holds the vectors the three check).
import { createHash } from 'node:crypto';

const utf8 = new TextEncoder();

// A part as bytes: a string as UTF-8, an integer in decimal ASCII, bytes as
// they are; so "1" and 1 give the same id.
function partBytes(part, i) {
  if (typeof part === 'string') return utf8.encode(part);
  if (typeof part === 'bigint') return utf8.encode(part.toString());
  if (typeof part === 'number') {
    if (Number.isSafeInteger(part)) return utf8.encode(String(part));
    const what = Number.isInteger(part) ? 'an integer beyond 2^53 (pass it as a bigint)' : 'a number that is not an integer';
    throw new TypeError(`transactionId: part ${i} is ${what}`);
  }
  if (part instanceof Uint8Array) return part;
  throw new TypeError(`transactionId: part ${i} is ${describe(part)}; a part is a string, an integer (a number or a bigint) or bytes (a Uint8Array)`);
}

function describe(value) {
  if (value === null) return 'null';
  if (value === undefined) return 'undefined';
  if (typeof value === 'object') return `an object (${value.constructor?.name ?? 'null prototype'})`;
  return `a ${typeof value}`;
}

/**
 * A transaction id that depends only on parts: each part as bytes,
 * prefixed with its length as 4 big-endian bytes (which keeps ("ab", "c")
 * apart from ("a", "bc")), all hashed with SHA-256; the id is the first 32
 * hex digits.
 * @param {...(string|number|bigint|Uint8Array)} parts
 * @returns {string}
 */
export function transactionId(...parts) {
  if (parts.length === 0) throw new TypeError('transactionId needs at least one part');
  const hash = createHash('sha256');
  parts.forEach((part, i) => {
    const bytes = partBytes(part, i);
    const length = Buffer.alloc(4);
    length.writeUInt32BE(bytes.length);
    hash.update(length).update(bytes);
  });
  return hash.digest('hex').slice(0, 32);
}
