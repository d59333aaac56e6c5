// The canonical msgpack encoder of the protocol (PROTOCOL.md, section 3):
// shortest integer forms (unsigned for non-negative values), 64-bit floats
// only, `str` for text, shortest map/array headers, the shortest timestamp
// layout, keys in insertion order, and undefined map values left out.
//
// It is written here rather than taken from @msgpack/msgpack's Encoder
// because the protocol needs three things that encoder cannot do: copying
// an already-encoded payload verbatim (RawMsgpack), keeping the nanoseconds
// of a timestamp (PreciseDate), and writing any bigint up to 64 bits next to
// plain numbers in the same value.
import { ExtData, encodeTimeSpecToTimestamp } from '@msgpack/msgpack';
import { RawMsgpack } from './raw.js';
import { timeSpecOf } from './precise-date.js';

const MAX_DEPTH = 100;
const MAX_UINT64 = (1n << 64n) - 1n;
const MIN_INT64 = -(1n << 63n);
const textEncoder = new TextEncoder();

class Writer {
  constructor(initialSize = 256) {
    this.bytes = new Uint8Array(initialSize);
    this.view = new DataView(this.bytes.buffer);
    this.pos = 0;
  }

  reserve(n) {
    const need = this.pos + n;
    if (need <= this.bytes.length) return;
    let size = this.bytes.length * 2;
    while (size < need) size *= 2;
    const grown = new Uint8Array(size);
    grown.set(this.bytes.subarray(0, this.pos));
    this.bytes = grown;
    this.view = new DataView(grown.buffer);
  }

  u8(v) {
    this.reserve(1);
    this.bytes[this.pos++] = v;
  }

  typed(tag, setter, size, v) {
    this.reserve(1 + size);
    this.bytes[this.pos] = tag;
    setter.call(this.view, this.pos + 1, v);
    this.pos += 1 + size;
  }

  raw(bytes) {
    this.reserve(bytes.length);
    this.bytes.set(bytes, this.pos);
    this.pos += bytes.length;
  }

  result() {
    return this.bytes.subarray(0, this.pos);
  }
}

const DV = DataView.prototype;

function writeInteger(w, n) {
  // n is a safe integer or a bigint; both take the shortest form.
  if (n >= 0) {
    if (n < 0x80) w.u8(Number(n));
    else if (n < 0x100) w.typed(0xcc, DV.setUint8, 1, Number(n));
    else if (n < 0x10000) w.typed(0xcd, DV.setUint16, 2, Number(n));
    else if (n < 0x100000000) w.typed(0xce, DV.setUint32, 4, Number(n));
    else w.typed(0xcf, DV.setBigUint64, 8, BigInt(n));
  } else {
    if (n >= -0x20) w.u8(0xe0 | (Number(n) + 0x20));
    else if (n >= -0x80) w.typed(0xd0, DV.setInt8, 1, Number(n));
    else if (n >= -0x8000) w.typed(0xd1, DV.setInt16, 2, Number(n));
    else if (n >= -0x80000000) w.typed(0xd2, DV.setInt32, 4, Number(n));
    else w.typed(0xd3, DV.setBigInt64, 8, BigInt(n));
  }
}

function writeNumber(w, n) {
  // -0 is a float: an integer form would lose its sign.
  if (Number.isSafeInteger(n) && !Object.is(n, -0)) writeInteger(w, n);
  else w.typed(0xcb, DV.setFloat64, 8, n);
}

function writeBigInt(w, n) {
  if (n > MAX_UINT64 || n < MIN_INT64) {
    throw new RangeError(`integer ${n} does not fit in 64 bits`);
  }
  writeInteger(w, n);
}

function writeHeader(w, size, fix, fixMax, tag16, tag32) {
  if (size <= fixMax) w.u8(fix | size);
  else if (size < 0x10000) w.typed(tag16, DV.setUint16, 2, size);
  else w.typed(tag32, DV.setUint32, 4, size);
}

function writeString(w, s) {
  const bytes = textEncoder.encode(s);
  const n = bytes.length;
  if (n < 32) w.u8(0xa0 | n);
  else if (n < 0x100) w.typed(0xd9, DV.setUint8, 1, n);
  else if (n < 0x10000) w.typed(0xda, DV.setUint16, 2, n);
  else w.typed(0xdb, DV.setUint32, 4, n);
  w.raw(bytes);
}

function writeBinary(w, bytes) {
  const n = bytes.length;
  if (n < 0x100) w.typed(0xc4, DV.setUint8, 1, n);
  else if (n < 0x10000) w.typed(0xc5, DV.setUint16, 2, n);
  else w.typed(0xc6, DV.setUint32, 4, n);
  w.raw(bytes);
}

function writeExtension(w, type, data) {
  const n = data.length;
  const fixed = { 1: 0xd4, 2: 0xd5, 4: 0xd6, 8: 0xd7, 16: 0xd8 }[n];
  if (fixed !== undefined) {
    w.u8(fixed);
  } else if (n < 0x100) {
    w.typed(0xc7, DV.setUint8, 1, n);
  } else if (n < 0x10000) {
    w.typed(0xc8, DV.setUint16, 2, n);
  } else {
    w.typed(0xc9, DV.setUint32, 4, n);
  }
  w.u8(type & 0xff);
  w.raw(data);
}

function writeMapEntries(w, entries, depth) {
  writeHeader(w, entries.length, 0x80, 15, 0xde, 0xdf);
  for (const [k, v] of entries) {
    writeValue(w, k, depth);
    writeValue(w, v, depth);
  }
}

function writeValue(w, v, depth) {
  if (depth > MAX_DEPTH) throw new RangeError(`value nested deeper than ${MAX_DEPTH} levels`);
  switch (typeof v) {
    case 'undefined':
    case 'object':
      break;
    case 'boolean':
      w.u8(v ? 0xc3 : 0xc2);
      return;
    case 'number':
      writeNumber(w, v);
      return;
    case 'bigint':
      writeBigInt(w, v);
      return;
    case 'string':
      writeString(w, v);
      return;
    default:
      throw new TypeError(`cannot encode a ${typeof v} as msgpack`);
  }
  if (v === null || v === undefined) {
    w.u8(0xc0);
  } else if (v instanceof RawMsgpack) {
    w.raw(v.bytes);
  } else if (Array.isArray(v)) {
    writeHeader(w, v.length, 0x90, 15, 0xdc, 0xdd);
    for (const item of v) writeValue(w, item, depth + 1);
  } else if (v instanceof Uint8Array) {
    writeBinary(w, v);
  } else if (ArrayBuffer.isView(v)) {
    writeBinary(w, new Uint8Array(v.buffer, v.byteOffset, v.byteLength));
  } else if (v instanceof ArrayBuffer) {
    writeBinary(w, new Uint8Array(v));
  } else if (v instanceof Date) {
    writeExtension(w, -1, encodeTimeSpecToTimestamp(timeSpecOf(v)));
  } else if (v instanceof ExtData) {
    const data = v.data instanceof Uint8Array ? v.data : v.data(0);
    writeExtension(w, v.type, data);
  } else if (v instanceof Map) {
    writeMapEntries(w, [...v.entries()].filter(([, x]) => x !== undefined), depth + 1);
  } else {
    // Optional fields without a value are left out, not sent as nil.
    writeMapEntries(w, Object.entries(v).filter(([, x]) => x !== undefined), depth + 1);
  }
}

/**
 * Encodes one value canonically.
 * @param {unknown} value
 * @returns {Uint8Array}
 */
export function encode(value) {
  const w = new Writer();
  writeValue(w, value, 0);
  return w.result();
}

/**
 * Encodes one value as a complete frame: a 4-byte big-endian body length,
 * then the body. Writing the body behind a reserved header saves a copy.
 * @param {unknown} value
 * @returns {Uint8Array}
 */
export function encodeFrame(value) {
  const w = new Writer(1024);
  w.pos = 4;
  writeValue(w, value, 0);
  w.view.setUint32(0, w.pos - 4);
  return w.result();
}
