// The codec without a sidecar: the golden frames of protocol/testdata/golden
// decode and encode again byte for byte (PROTOCOL.md, section 7), and the
// canonical encoding rules hold for values the frames do not cover.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import {
  Codes, ConflictError, DrainingError, FrameReader, InternalError, PreciseDate, QueensideError, RawMsgpack,
  UnavailableError, decode, decodeEnvelope, encode, encodeEnvelope,
} from '../src/index.js';
import { errorFromWire } from '../src/errors.js';
import { REPO_ROOT } from './harness.js';

const goldenDir = `${REPO_ROOT}protocol/testdata/golden/`;
const manifest = JSON.parse(readFileSync(`${goldenDir}manifest.json`, 'utf8'));
const hex = (bytes) => Buffer.from(bytes).toString('hex');

test('the manifest lists frames of every kind', () => {
  const kinds = new Set(manifest.frames.map((f) => f.kind));
  assert.deepEqual([...kinds].sort(), ['notice', 'request', 'response']);
});

for (const frame of manifest.frames) {
  test(`golden frame ${frame.name} (${frame.kind}) decodes and re-encodes byte for byte`, () => {
    const file = readFileSync(goldenDir + frame.file);
    assert.equal(file.readUInt32BE(0), file.length - 4, 'the length prefix counts the body');
    const envelope = decodeEnvelope(file.subarray(4));
    assert.equal(hex(encodeEnvelope(envelope)), hex(file));
    // The frame reader finds the same body when the bytes come one at a time.
    const reader = new FrameReader();
    const bodies = [];
    for (const byte of file) bodies.push(...reader.push(Uint8Array.of(byte)));
    assert.equal(bodies.length, 1);
    assert.equal(hex(bodies[0]), hex(file.subarray(4)));
  });
}

test('golden frames decode into the values they were made from', () => {
  const read = (name) => decodeEnvelope(readFileSync(`${goldenDir}${name}.bin`).subarray(4));

  const push = read('response_push').result.results;
  assert.equal(push[0].committedAt.toPreciseISOString(), '2026-11-30T12:00:00.123456789Z');
  assert.equal(push[1].offset, 300);
  assert.equal(push[2].error.code, 'invalid_argument');

  const pop = read('response_pop').result;
  assert.ok(pop.messages[0].payload instanceof RawMsgpack, 'payloads keep their bytes');
  assert.deepEqual(decode(pop.messages[0].payload.bytes), ['sku-2', 1]);
  assert.equal(pop.messages[0].redelivered, true);
  assert.equal(pop.leases[0].headAttempts, 2);

  const request = read('request_push');
  assert.equal(request.timeoutMs, 5000);
  assert.deepEqual(decode(request.args.items[0].payload.bytes), ['sku-1', 2, true, null, 1.5]);

  assert.equal(read('response_stats').result.partitions[0].headOffset, 70000);
  assert.deepEqual(read('notice_draining'), { id: 0, notice: 'draining' });

  const err = errorFromWire(read('response_error').error, 'push');
  assert.ok(err instanceof QueensideError);
  assert.equal(err.code, 'invalid_argument');
  assert.equal(err.retryable, false);
  assert.deepEqual(err.details, { field: 'items' });
  const retryable = errorFromWire(read('response_error_retryable').error);
  assert.ok(retryable instanceof UnavailableError);
  assert.equal(retryable.retryable, true);
});

test('integers take the shortest form, unsigned when not negative', () => {
  const cases = [
    [0, '00'], [127, '7f'], [128, 'cc80'], [300, 'cd012c'], [70000, 'ce00011170'],
    [2 ** 32, 'cf0000000100000000'], [-1, 'ff'], [-32, 'e0'], [-33, 'd0df'], [-129, 'd1ff7f'],
    [-(2 ** 31) - 1, 'd3ffffffff7fffffff'], [2n ** 63n, 'cf8000000000000000'], [5n, '05'],
  ];
  for (const [value, want] of cases) assert.equal(hex(encode(value)), want, `encode(${value})`);
});

test('64-bit integers decode exactly: numbers when safe, bigints beyond', () => {
  assert.equal(decode(encode(2 ** 40)), 2 ** 40);
  assert.equal(decode(encode(-(2 ** 40))), -(2 ** 40));
  assert.equal(decode(encode(2n ** 60n)), 2n ** 60n);
  assert.equal(decode(encode(-(2n ** 60n))), -(2n ** 60n));
  assert.throws(() => encode(2n ** 64n), RangeError);
});

test('floats are always 64-bit; strings are str, bytes are bin', () => {
  assert.equal(hex(encode(1.5)), 'cb3ff8000000000000');
  assert.equal(hex(encode(-0)), 'cb8000000000000000');
  assert.equal(hex(encode('é')), 'a2c3a9');
  assert.equal(hex(encode('x'.repeat(32))).slice(0, 4), 'd920');
  assert.equal(hex(encode(Uint8Array.of(1, 2))), 'c4020102');
});

test('timestamps take the shortest layout and keep their nanoseconds', () => {
  assert.equal(hex(encode(new Date('2026-11-30T11:59:59Z'))), 'd6ff6b0d653f');
  const precise = new PreciseDate(Date.parse('2026-11-30T12:00:00Z') / 1000, 123456789);
  assert.equal(hex(encode(precise)), 'd7ff1d6f34546b0d6540');
  const back = decode(encode(precise));
  assert.ok(back instanceof PreciseDate);
  assert.equal(back.nanoseconds, 123456789);
  assert.equal(back.getTime(), precise.getTime());
  assert.equal(hex(encode(new PreciseDate(-1, 5))), 'c70cff00000005ffffffffffffffff');
  // A PreciseDate changed in place encodes its new millisecond value.
  back.setTime(Date.parse('2026-11-30T11:59:59Z'));
  assert.equal(hex(encode(back)), 'd6ff6b0d653f');
});

test('maps keep their key order and leave out undefined values', () => {
  assert.equal(hex(encode({ b: 1, a: undefined, c: null })), '82a16201a163c0');
  assert.equal(hex(encode(new Map([['z', 1], ['y', 2]]))), '82a17a01a17902');
  assert.equal(hex(encode(new RawMsgpack(Uint8Array.of(0x92, 0x01, 0x02)))), '920102');
});

test('the frame reader splits frames that share a chunk or span several', () => {
  const frames = [encodeEnvelope({ id: 1, result: {} }), encodeEnvelope({ id: 2, result: { x: 'y'.repeat(100) } })];
  const stream = Buffer.concat(frames);
  const reader = new FrameReader();
  const bodies = [...reader.push(stream.subarray(0, 3)), ...reader.push(stream.subarray(3, 50)), ...reader.push(stream.subarray(50))];
  assert.deepEqual(bodies.map((b) => decodeEnvelope(b).id), [1, 2]);
  assert.equal(reader.buffered, 0);
  assert.throws(() => new FrameReader().push(Uint8Array.of(0, 0, 0, 0)), RangeError);
});

test('every protocol code has its error class; unknown codes keep code and flag', () => {
  for (const code of Object.keys(Codes)) {
    const err = errorFromWire({ code, message: 'm', retryable: false });
    assert.equal(err.code, code);
    assert.notEqual(err.constructor, QueensideError, `${code} has its own class`);
    assert.match(err.name, /Error$/);
  }
  assert.ok(errorFromWire({ code: 'conflict', message: 'm', retryable: false, details: { acks: [1] } }) instanceof ConflictError);
  assert.deepEqual(errorFromWire({ code: 'conflict', details: { acks: [1] } }).acks, [1]);
  assert.ok(errorFromWire({ code: 'draining', message: 'm', retryable: true }) instanceof DrainingError);
  assert.ok(errorFromWire({ code: 'internal', message: 'm', retryable: true }) instanceof InternalError);
  const future = errorFromWire({ code: 'some_new_code', message: 'm', retryable: true });
  assert.equal(future.constructor, QueensideError);
  assert.equal(future.code, 'some_new_code');
  assert.equal(future.retryable, true);
});
