// Decoding uses @msgpack/msgpack's Decoder, with two adjustments that the
// protocol needs: timestamps become PreciseDate (nanoseconds kept), and
// 64-bit integers stay exact. The library gives either numbers for every
// 64-bit form (inexact above 2^53) or bigints for all of them; this module
// asks for bigints and turns back into numbers those that fit, so callers
// see plain numbers except where only a bigint is exact.
import { Decoder, ExtData, ExtensionCodec, decodeTimestampToTimeSpec } from '@msgpack/msgpack';
import { PreciseDate } from './precise-date.js';

const extensionCodec = new ExtensionCodec();
extensionCodec.register({
  type: -1,
  encode: () => null, // encoding is done by ./encode.js
  decode: (data) => {
    // A timestamp of a length the standard does not define stays raw
    // rather than failing everything around it.
    if (![4, 8, 12].includes(data.length)) return new ExtData(-1, data);
    const { sec, nsec } = decodeTimestampToTimeSpec(data);
    return new PreciseDate(sec, nsec);
  },
});

const decoder = new Decoder({ extensionCodec, useBigInt64: true });

const UINT64 = 0xcf;
const INT64 = 0xd3;

/**
 * Decodes exactly one msgpack value (trailing bytes are an error).
 * @param {Uint8Array} bytes
 * @returns {unknown}
 */
export function decode(bytes) {
  const value = decoder.decode(bytes);
  // Only the uint64/int64 forms produce bigints; when neither byte occurs
  // anywhere there is nothing to look for.
  if (bytes.includes(UINT64) || bytes.includes(INT64)) return narrowBigInts(value);
  return value;
}

function narrowBigInts(v) {
  if (typeof v === 'bigint') {
    return v >= BigInt(Number.MIN_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v;
  }
  if (Array.isArray(v)) {
    for (let i = 0; i < v.length; i++) v[i] = narrowBigInts(v[i]);
  } else if (v !== null && typeof v === 'object' && Object.getPrototypeOf(v) === Object.prototype) {
    for (const k of Object.keys(v)) v[k] = narrowBigInts(v[k]);
  }
  return v;
}
