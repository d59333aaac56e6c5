// Every error class that a test can provoke, each from a real sidecar:
// the main one, one with a 1 KiB frame limit, one whose database cannot be
// reached, one that refuses this user, and one that drains.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { join } from 'node:path';
import {
  BadRequestError, ConnectionError, DeadlineExceededError, DrainingError, FrameTooLargeError, InvalidArgumentError,
  NotFoundError, OverloadedError, QueensideError, UnauthorizedError, UnavailableError, UnknownOpError,
  UnsupportedError, connect,
} from '../src/index.js';
import { SMALL_FRAME_BYTES, startServe, testSidecars, uniqueQueue } from './harness.js';

let sidecars;
let client;
before(async () => {
  sidecars = await testSidecars();
  client = await connect({ socket: sidecars.socket });
});
after(async () => {
  await client?.close();
  await sidecars?.stop();
});

async function rejection(promise) {
  return promise.then((v) => assert.fail(`resolved with ${JSON.stringify(v)}`), (e) => e);
}

function assertError(err, ErrorClass, code, retryable) {
  assert.ok(err instanceof ErrorClass, `${err?.name}: ${err?.message} is not a ${ErrorClass.name}`);
  assert.ok(err instanceof QueensideError);
  assert.equal(err.code, code);
  assert.equal(err.retryable, retryable);
}

describe('answered by the main sidecar', () => {
  test('invalid_argument for a bad argument, and per item in push', async () => {
    const err = await rejection(client.pop(uniqueQueue('bad'), { batch: 0 }));
    assertError(err, InvalidArgumentError, 'invalid_argument', false);
    assert.equal(err.op, 'pop');
    assert.match(err.message, /batch/);
    assertError(await rejection(client.configure('not a valid name!')), InvalidArgumentError, 'invalid_argument', false);
    // An item the sidecar refuses fails alone (the client refuses one with no queue or payload itself).
    const [item, good] = await client.push([{ queue: uniqueQueue('bad'), partition: '', payload: 1 }, { queue: uniqueQueue('good'), payload: 2 }]);
    assert.equal(item.status, 'failed');
    assert.equal(item.error.code, 'invalid_argument');
    assert.equal(good.status, 'queued');
  });

  test('not_found for a queue never created', async () => {
    assertError(await rejection(client.stats(uniqueQueue('missing'))), NotFoundError, 'not_found', false);
    assertError(await rejection(client.dlq(uniqueQueue('missing'))), NotFoundError, 'not_found', false);
  });

  test('unknown_op through a raw call', async () => {
    assertError(await rejection(client.call('frobnicate', {})), UnknownOpError, 'unknown_op', false);
  });

  test('unsupported for another protocol version', async () => {
    assertError(await rejection(client.hello({ protocol: 2 })), UnsupportedError, 'unsupported', false);
  });

  test('bad_request for a malformed envelope fails that call alone', async () => {
    const err = await rejection(client.call('push', 'args that are not a map'));
    assertError(err, BadRequestError, 'bad_request', false);
    assert.equal((await client.health()).status, 'ok', 'the connection carries on');
  });

  test('deadline_exceeded when timeoutMs runs out', async () => {
    const queue = uniqueQueue('deadline');
    const items = Array.from({ length: 1000 }, (_, i) => ({ queue, payload: i, transactionId: `t${i}` }));
    assertError(await rejection(client.push(items, { timeoutMs: 1 })), DeadlineExceededError, 'deadline_exceeded', true);
    // The answer did not say whether the items were stored: with transaction
    // ids a retry is safe either way.
    const retry = await client.push(items, { timeoutMs: 30_000 });
    assert.ok(retry.every((r) => r.status === 'queued' || r.status === 'duplicate'));
  });

  test('frame_too_large is refused locally once the limit is known, and the connection lives on', async () => {
    const payload = new Uint8Array(client.maxFrameBytes + 1);
    const err = await rejection(client.push({ queue: uniqueQueue('big'), payload }));
    assertError(err, FrameTooLargeError, 'frame_too_large', false);
    assert.match(err.message, new RegExp(`above the sidecar's frame limit of ${client.maxFrameBytes} bytes \\(its --max-frame-bytes\\)`));
    assert.equal(client.closed, false);
    assert.equal((await client.health()).status, 'ok');
  });
});

describe('answered by a sidecar with a 1 KiB frame limit', () => {
  test('frame_too_large from the sidecar ends the connection and fails every call', async (t) => {
    if (!sidecars.smallSocket) return t.skip('no second sidecar (the dev database URL was not found)');
    const small = await connect({ socket: sidecars.smallSocket, hello: false });
    const closed = new Promise((resolve) => small.once('close', resolve));
    const queue = uniqueQueue('toolarge');
    const waiting = small.pop(queue, { waitMs: 10_000 });
    const err = await rejection(small.push({ queue, payload: 'x'.repeat(SMALL_FRAME_BYTES) }));
    assertError(err, FrameTooLargeError, 'frame_too_large', false);
    assert.equal(await rejection(waiting), err, 'the call in flight fails with the same error');
    assert.equal(await closed, err);
    assert.equal(small.closed, true);
    assert.ok(await rejection(small.health()) instanceof FrameTooLargeError);
  });

  test('overloaded when the next message alone would not fit an answer', async (t) => {
    if (!sidecars.smallSocket) return t.skip('no second sidecar (the dev database URL was not found)');
    const small = await connect({ socket: sidecars.smallSocket });
    try {
      assert.equal(small.maxFrameBytes, SMALL_FRAME_BYTES);
      const queue = uniqueQueue('overload');
      const [pushed] = await small.push({ queue, payload: 'x'.repeat(SMALL_FRAME_BYTES - 100) });
      assert.equal(pushed.status, 'queued');
      assertError(await rejection(small.pop(queue)), OverloadedError, 'overloaded', true);
    } finally {
      await small.close();
    }
  });
});

describe('answered by a sidecar whose database cannot be reached', () => {
  let down;
  before(async () => {
    down = await startServe(sidecars.bin, sidecars.dir, {
      name: `down-${process.pid}`,
      databaseUrl: `postgres://postgres@/none?host=${join(sidecars.dir, 'no-postgres-here')}&connect_timeout=1`,
      args: ['--spool-max-bytes', '400'],
      healthy: false,
    });
  });
  after(() => down?.stop());

  test('unavailable for operations that need the database; pushes are spooled until the spool is full', async () => {
    // The answers as they come: stats would otherwise be retried for 5 s
    // (retry.test.js checks that).
    const c = await connect({ socket: down.socket, retry: false });
    try {
      const health = await c.health();
      assert.equal(health.status, 'unavailable');
      assert.equal(health.database.ok, false);
      assertError(await rejection(c.stats('anything')), UnavailableError, 'unavailable', true);
      assertError(await rejection(c.pop('anything')), UnavailableError, 'unavailable', true);
      const [buffered] = await c.push({ queue: 'spooled', payload: 1, transactionId: 'kept' });
      assert.equal(buffered.status, 'buffered');
      assert.equal(buffered.transactionId, 'kept');
      const [full] = await c.push({ queue: 'spooled', payload: 'x'.repeat(500) });
      assert.equal(full.status, 'failed');
      assert.equal(full.error.code, 'spool_full');
      assert.equal(full.error.retryable, true);
    } finally {
      await c.close();
    }
  });
});

describe('answered by a sidecar that refuses this user', () => {
  test('unauthorized ends the connection', async (t) => {
    if (!sidecars.databaseUrl) return t.skip('the dev database URL was not found');
    const strict = await startServe(sidecars.bin, sidecars.dir, {
      name: `strict-${process.pid}`,
      databaseUrl: sidecars.databaseUrl,
      args: ['--allow-uid', String(process.getuid() + 4242)],
      healthy: false,
    });
    try {
      // Without hello nothing is written, so the refusal is always read.
      const c = await connect({ socket: strict.socket, hello: false });
      const reason = await new Promise((resolve) => c.once('close', resolve));
      assertError(reason, UnauthorizedError, 'unauthorized', false);
      assert.ok(await rejection(c.health()) instanceof UnauthorizedError);
      // With hello, the write can meet the closed socket before the refusal
      // is read (see README, "Errors"): either way the connect fails.
      const err = await rejection(connect({ socket: strict.socket }));
      assert.ok(err instanceof UnauthorizedError || err instanceof ConnectionError, err);
    } finally {
      await strict.stop();
    }
  });
});

describe('a sidecar that drains', () => {
  test('the draining notice is seen, new requests are refused, health says draining', async (t) => {
    if (!sidecars.databaseUrl) return t.skip('the dev database URL was not found');
    const draining = await startServe(sidecars.bin, sidecars.dir, {
      name: `drain-${process.pid}`, databaseUrl: sidecars.databaseUrl,
    });
    try {
      const c = await connect({ socket: draining.socket });
      const queue = uniqueQueue('drain');
      const waiting = c.pop(queue, { waitMs: 30_000 });
      // Frames are read in order: once health is answered the pop is being
      // served. (A request still unread when the drain begins can go
      // unanswered: the sidecar closes the connection when nothing is in
      // flight.)
      await c.health();
      const noticed = new Promise((resolve) => c.once('draining', resolve));
      draining.child.kill('SIGTERM');
      await noticed;
      assert.equal(c.draining, true);
      // Refused as the sidecar would refuse it, without a round trip.
      assertError(await rejection(c.stats(queue)), DrainingError, 'draining', true);
      assert.deepEqual((await waiting).messages, [], 'a waiting pop ends with nothing');
      // health is still sent; the sidecar closes the connection as soon as
      // nothing is in flight, so it can meet the close instead of an answer.
      const health = await c.health().catch((e) => e);
      if (health instanceof Error) assert.ok(health instanceof ConnectionError, health);
      else assert.equal(health.status, 'draining');
      await draining.child.exited;
      assert.ok(await rejection(c.health()) instanceof ConnectionError);
    } finally {
      await draining.stop();
    }
  });
});

describe('connection errors', () => {
  test('connecting to no sidecar', async () => {
    const err = await rejection(connect({ socket: join(sidecars.dir, 'nobody-here.sock') }));
    assert.ok(err instanceof ConnectionError);
    assert.equal(err.code, 'connection');
  });

  test('closing fails the calls in flight and every later call', async () => {
    const c = await connect({ socket: sidecars.socket });
    const waiting = rejection(c.pop(uniqueQueue('closing'), { waitMs: 10_000 }));
    await c.close();
    assert.ok(await waiting instanceof ConnectionError);
    assert.ok(await rejection(c.health()) instanceof ConnectionError);
    assert.equal(c.closed, true);
  });
});
