// Envelopes (PROTOCOL.md, section 2): the maps that frames carry. A decoded
// envelope keeps every payload as its exact bytes (RawMsgpack), so that
// encoding it again gives the same frame.
import { decode } from './decode.js';
import { encodeFrame } from './encode.js';
import { RawMsgpack } from './raw.js';
import { payloadSpans } from './spans.js';

const NIL = 0xc0;

/**
 * Decodes a frame body into an envelope object, keys in the order read.
 * @param {Uint8Array} body
 * @returns {Record<string, any>}
 */
export function decodeEnvelope(body) {
  const spans = payloadSpans(body);
  // The envelope is decoded with every payload replaced by nil, then the
  // payloads are put back as bytes. A payload is decoded later, on its own,
  // so one that has no JS value (a map with a binary key, say) costs only
  // its own message its decoded form, never the whole answer; and no
  // payload is decoded twice.
  const envelope = decode(spans.length > 0 ? withNilPayloads(body, spans) : body);
  if (envelope === null || typeof envelope !== 'object' || Array.isArray(envelope)) {
    throw new TypeError('a frame body must be a msgpack map');
  }
  for (const { path, index, start, end } of spans) {
    const element = path.reduce((value, key) => value?.[key], envelope)?.[index];
    if (element !== null && typeof element === 'object') element.payload = new RawMsgpack(body.subarray(start, end));
  }
  return envelope;
}

// A copy of body in which each payload span is one nil byte.
function withNilPayloads(body, spans) {
  const removed = spans.reduce((n, s) => n + (s.end - s.start - 1), 0);
  const out = new Uint8Array(body.length - removed);
  let from = 0;
  let at = 0;
  for (const { start, end } of spans) {
    out.set(body.subarray(from, start), at);
    at += start - from;
    out[at++] = NIL;
    from = end;
  }
  out.set(body.subarray(from), at);
  return out;
}

/**
 * Encodes an envelope as a complete frame (length prefix and body).
 * @param {Record<string, any>} envelope
 * @returns {Uint8Array}
 */
export function encodeEnvelope(envelope) {
  return encodeFrame(envelope);
}
