// Turning decoded results into what callers get: messages (pop, and the
// pop an ack carried) and dead letters (dlq) with their payload decoded, and the exact bytes beside it;
// messages with their ack helpers.
import { decode } from './codec/decode.js';
import { RawMsgpack } from './codec/raw.js';
import { completed, failed } from './items.js';

const LISTS_WITH_PAYLOADS = ['messages', 'entries'];

// A popped message's own helpers, as in the Go and Python clients:
// msg.completed() and msg.failed(reason) are its ack items. Not enumerable,
// so that a message still prints, compares and serialises as plain data.
const MESSAGE_METHODS = Object.freeze({
  completed: {
    value: function completedItem() {
      return completed(this);
    },
  },
  failed: {
    value: function failedItem(reason) {
      return failed(this, reason);
    },
  },
});

/**
 * Replaces each RawMsgpack payload of result.messages / result.entries by
 * its decoded value, and adds `payloadBytes` (a copy, so that a kept message
 * does not pin the whole frame it came in); gives each message its
 * completed() and failed().
 * @param {Record<string, any>} result
 */
export function decodePayloads(result) {
  // The pop an ack carried (revision 1.2) is a pop result of its own.
  if (result?.pop !== null && typeof result?.pop === 'object') decodePayloads(result.pop);
  for (const list of LISTS_WITH_PAYLOADS) {
    const elements = result?.[list];
    if (!Array.isArray(elements)) continue;
    for (const element of elements) {
      if (list === 'messages' && element !== null && typeof element === 'object') {
        Object.defineProperties(element, MESSAGE_METHODS);
      }
      if (!(element?.payload instanceof RawMsgpack)) continue;
      const bytes = new Uint8Array(element.payload.bytes); // a copy (Buffer#slice would be a view)
      element.payloadBytes = bytes;
      try {
        element.payload = decode(bytes);
      } catch {
        // Valid msgpack that has no JS value (a timestamp extension of a
        // length the standard does not define, say): the bytes stay usable.
        element.payload = undefined;
      }
    }
  }
  return result;
}
