// Byte-level walking of msgpack data, without building values. Payloads are
// kept as the exact bytes the sidecar sent (so that they can be forwarded or
// re-encoded unchanged), and a generic decoder cannot say where a value's
// bytes were; this module can.

export class MsgpackFormatError extends Error {}

function need(bytes, end) {
  if (end > bytes.length) throw new MsgpackFormatError('msgpack value cut short');
  return end;
}

function view(bytes) {
  return new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/**
 * Where the header of the value at pos ends, and what follows it: `skip`
 * bytes of content and `items` nested values (two per map entry).
 * @returns {{next: number, skip: number, items: number}}
 */
function header(bytes, pos) {
  need(bytes, pos + 1);
  const b = bytes[pos];
  const dv = view(bytes);
  const at = pos + 1;
  if (b <= 0x7f || b >= 0xe0) return { next: at, skip: 0, items: 0 }; // fixint
  if (b <= 0x8f) return { next: at, skip: 0, items: 2 * (b & 0x0f) }; // fixmap
  if (b <= 0x9f) return { next: at, skip: 0, items: b & 0x0f }; // fixarray
  if (b <= 0xbf) return { next: at, skip: b & 0x1f, items: 0 }; // fixstr
  switch (b) {
    case 0xc0: case 0xc2: case 0xc3:
      return { next: at, skip: 0, items: 0 };
    case 0xc4: case 0xd9: // bin8, str8
      return { next: need(bytes, at + 1), skip: dv.getUint8(at), items: 0 };
    case 0xc5: case 0xda: // bin16, str16
      return { next: need(bytes, at + 2), skip: dv.getUint16(at), items: 0 };
    case 0xc6: case 0xdb: // bin32, str32
      return { next: need(bytes, at + 4), skip: dv.getUint32(at), items: 0 };
    case 0xc7: // ext8: length, type, data
      return { next: need(bytes, at + 2), skip: dv.getUint8(at), items: 0 };
    case 0xc8:
      return { next: need(bytes, at + 3), skip: dv.getUint16(at), items: 0 };
    case 0xc9:
      return { next: need(bytes, at + 5), skip: dv.getUint32(at), items: 0 };
    case 0xca: return { next: at, skip: 4, items: 0 };
    case 0xcb: return { next: at, skip: 8, items: 0 };
    case 0xcc: case 0xd0: return { next: at, skip: 1, items: 0 };
    case 0xcd: case 0xd1: return { next: at, skip: 2, items: 0 };
    case 0xce: case 0xd2: return { next: at, skip: 4, items: 0 };
    case 0xcf: case 0xd3: return { next: at, skip: 8, items: 0 };
    case 0xd4: return { next: at, skip: 2, items: 0 }; // fixext1: type + 1
    case 0xd5: return { next: at, skip: 3, items: 0 };
    case 0xd6: return { next: at, skip: 5, items: 0 };
    case 0xd7: return { next: at, skip: 9, items: 0 };
    case 0xd8: return { next: at, skip: 17, items: 0 };
    case 0xdc: return { next: need(bytes, at + 2), skip: 0, items: dv.getUint16(at) };
    case 0xdd: return { next: need(bytes, at + 4), skip: 0, items: dv.getUint32(at) };
    case 0xde: return { next: need(bytes, at + 2), skip: 0, items: 2 * dv.getUint16(at) };
    case 0xdf: return { next: need(bytes, at + 4), skip: 0, items: 2 * dv.getUint32(at) };
    default:
      throw new MsgpackFormatError(`byte 0x${b.toString(16)} starts no msgpack value`);
  }
}

/**
 * The position just after the value that starts at pos.
 * @param {Uint8Array} bytes
 * @param {number} pos
 * @returns {number}
 */
export function valueEnd(bytes, pos) {
  // A counter of values still to skip, instead of recursion, so that deep
  // nesting cannot exhaust the stack.
  let pending = 1;
  while (pending > 0) {
    const h = header(bytes, pos);
    pos = need(bytes, h.next + h.skip);
    pending += h.items - 1;
  }
  return pos;
}

/** Whether bytes hold exactly one well-formed msgpack value. */
export function isSingleValue(bytes) {
  try {
    return valueEnd(bytes, 0) === bytes.length;
  } catch {
    return false;
  }
}

const textDecoder = new TextDecoder();

/** Reads a map key if it is a string, else returns undefined. */
function keyAt(bytes, pos) {
  const b = bytes[pos];
  if (!((b >= 0xa0 && b <= 0xbf) || b === 0xd9 || b === 0xda || b === 0xdb)) return undefined;
  const h = header(bytes, pos);
  return textDecoder.decode(bytes.subarray(h.next, need(bytes, h.next + h.skip)));
}

/**
 * Calls visit(key, start, end) for each entry of the map at pos, where
 * start..end are the bytes of the entry's value. Returns false when the
 * value at pos is not a map.
 */
function eachEntry(bytes, pos, visit) {
  const h = header(bytes, pos);
  const b = bytes[pos];
  if (!((b >= 0x80 && b <= 0x8f) || b === 0xde || b === 0xdf)) return false;
  let at = h.next;
  for (let i = 0; i < h.items / 2; i++) {
    const key = keyAt(bytes, at);
    const start = valueEnd(bytes, at);
    const end = valueEnd(bytes, start);
    visit(key, start, end);
    at = end;
  }
  return true;
}

/** Calls visit(index, start) for each element of the array at pos. */
function eachElement(bytes, pos, visit) {
  const b = bytes[pos];
  if (!((b >= 0x90 && b <= 0x9f) || b === 0xdc || b === 0xdd)) return;
  const h = header(bytes, pos);
  let at = h.next;
  for (let i = 0; i < h.items; i++) {
    visit(i, at);
    at = valueEnd(bytes, at);
  }
}

// Where payloads sit in an envelope: under `result` (pop's messages, dlq's
// entries) or `args` (push's items, transaction's pushes), one per element;
// and under `result.pop`, the messages of the pop an ack carried (revision
// 1.2).
const PAYLOAD_PARENTS = new Set(['result', 'args']);
const PAYLOAD_LISTS = new Set(['messages', 'entries', 'items', 'pushes']);
const NESTED_POP = 'pop';

/**
 * Finds every payload in an envelope body, in the order of the bytes.
 * `path` names the keys from the envelope to the list holding the payload.
 * @param {Uint8Array} body a request or response envelope
 * @returns {Array<{path: string[], index: number, start: number, end: number}>}
 */
export function payloadSpans(body) {
  const found = [];
  const inLists = (path, mapStart) => {
    eachEntry(body, mapStart, (key, start) => {
      if (PAYLOAD_LISTS.has(key)) {
        const listPath = [...path, key];
        eachElement(body, start, (index, elementStart) => {
          eachEntry(body, elementStart, (field, from, to) => {
            if (field === 'payload') found.push({ path: listPath, index, start: from, end: to });
          });
        });
      } else if (key === NESTED_POP && path.length === 1 && path[0] === 'result') {
        inLists([...path, key], start); // not a map (maintenance's flag) finds nothing
      }
    });
  };
  eachEntry(body, 0, (parent, parentStart) => {
    if (PAYLOAD_PARENTS.has(parent)) inLists([parent], parentStart);
  });
  return found;
}
