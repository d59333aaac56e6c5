// The codes of a refused ack item (PROTOCOL.md, ack), and what each means in
// words, for error messages and logs: "ack item 0: already acknowledged
// (already_acked)". The words are generated from protocol/ (codes.js), as
// the Go and Python clients' are.
import { ACK_ITEM_CODES } from './codes.js';

export { ACK_ITEM_CODES };

/** The code of an item an earlier ack already settled: nothing was lost. */
export const ALREADY_ACKED = 'already_acked';

/**
 * "ack item 3: lease expired (lease_expired)".
 * @param {number} index the item's position in its call
 * @param {string} code
 */
export function describeAckItem(index, code) {
  const text = Object.hasOwn(ACK_ITEM_CODES, code) ? ACK_ITEM_CODES[code] : 'refused';
  return `ack item ${index}: ${text} (${code})`;
}
