// The codes of a refused ack item (PROTOCOL.md, ack), and what each means in
// words, for error messages and logs: "ack item 0: already acknowledged
// (already_acked)". The Go and Python clients use the same texts
// (clients/testdata/cases.json, ackItemCodes).

/** Each per-item code of ack, renew and release, and its text. */
export const ACK_ITEM_CODES = Object.freeze({
  already_acked: 'already acknowledged',
  lease_expired: 'lease expired',
  not_in_lease: 'not in the lease',
  unresolvable: 'transaction id not found',
  rewound: 'rewound',
  unavailable: 'database unavailable',
});

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
