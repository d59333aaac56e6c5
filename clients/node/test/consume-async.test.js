// consume() with ackAsync: every message acked once in fewer ack calls than
// batches, stopping sends the pending acks, nacks and releases keep their
// meaning, and a refused ack is reported and its message comes again.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { AckError, connect } from '../src/index.js';
import { testSidecars, uniqueQueue } from './harness.js';

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

async function pushSpread(queue, n, partitions) {
  for (let start = 0; start < n; start += 500) {
    const items = [];
    for (let i = start; i < Math.min(n, start + 500); i++) {
      items.push({ queue, partition: `p${i % partitions}`, payload: i, transactionId: `m-${i}` });
    }
    const results = await client.push(items);
    assert.ok(results.every((r) => r.status === 'queued'));
  }
}

// A client of its own whose ack calls are counted (items per call), and
// slowed down: while one is in flight the loop handles the next batches,
// whose acks must then share a call. Without the delay, on a fast machine,
// each ack could be answered before the next batch completes.
const ACK_DELAY_MS = 20;
async function countingClient() {
  const c = await connect({ socket: sidecars.socket });
  const calls = [];
  const ack = c.ack.bind(c);
  c.ack = async (items, options) => {
    calls.push(items.length);
    await new Promise((resolve) => setTimeout(resolve, ACK_DELAY_MS));
    return ack(items, options);
  };
  return { c, calls };
}

async function assertConsumed(queue, group) {
  const groups = await client.groups(queue);
  const g = groups.find((x) => x.group === group);
  assert.equal(g.lag, 0);
  const rest = await client.pop(queue, { group, batch: 100, partitions: 100 });
  assert.equal(rest.messages.length, 0);
}

describe('consume() with ackAsync', () => {
  test('every message is acked once, in fewer ack calls than batches', async () => {
    const queue = uniqueQueue('async-all');
    const n = 2000;
    await pushSpread(queue, n, 10);
    const { c, calls } = await countingClient();
    const stop = new AbortController();
    const seen = new Map();
    const leases = new Set();
    const errors = [];
    try {
      const totals = await c.consume(queue, (m) => {
        seen.set(m.transactionId, (seen.get(m.transactionId) ?? 0) + 1);
        leases.add(m.leaseId);
        if (seen.size === n) stop.abort();
      }, { group: 'g', batch: 10, concurrency: 2, waitMs: 500, signal: stop.signal, ackAsync: true, onAckError: (e) => errors.push(e) });
      assert.deepEqual(errors, []);
      assert.equal(seen.size, n);
      assert.ok([...seen.values()].every((k) => k === 1), 'a message was handled twice');
      assert.deepEqual(totals, { completed: n, failed: 0 });
      assert.equal(calls.reduce((a, b) => a + b, 0), n);
      assert.ok(calls.length < leases.size, `${calls.length} ack calls for ${leases.size} batches`);
    } finally {
      await c.close();
    }
    await assertConsumed(queue, 'g');
  });

  test('a stop right after handling sends the pending acks first', async () => {
    const queue = uniqueQueue('async-stop');
    await pushSpread(queue, 10, 1);
    const stop = new AbortController();
    const totals = await client.consume(queue, (m) => {
      if (m.offset === 9) stop.abort();
    }, { group: 'g', batch: 10, leaseSeconds: 60, waitMs: 500, signal: stop.signal, ackAsync: true });
    assert.deepEqual(totals, { completed: 10, failed: 0 });
    await assertConsumed(queue, 'g');
  });

  test('a nack and a stop mid-batch keep their meaning', async () => {
    const queue = uniqueQueue('async-nack');
    await pushSpread(queue, 10, 1);
    const stop = new AbortController();
    const handled = [];
    const totals = await client.consume(queue, (m) => {
      handled.push(m.offset);
      if (m.offset === 3 && !m.redelivered) throw new Error('once');
      if (m.offset === 6) stop.abort();
    }, { group: 'g', batch: 10, leaseSeconds: 60, waitMs: 500, signal: stop.signal, ackAsync: true });
    assert.deepEqual(handled, [0, 1, 2, 3, 3, 4, 5, 6]);
    assert.deepEqual(totals, { completed: 7, failed: 1 });
    // 0..6 acked; the rest released at once rather than left to expire.
    const rest = await client.pop(queue, { group: 'g', batch: 10 });
    assert.deepEqual(rest.messages.map((m) => m.offset), [7, 8, 9]);
  });

  const slowFirst = (stop, deliveries) => async (m) => {
    deliveries.push(m);
    if (deliveries.length === 1) await sleep(1500); // past the 1 s lease, not renewed
    else stop.abort();
  };
  const LAPSING = { group: 'g', batch: 1, leaseSeconds: 1, renewEveryMs: 3_600_000, waitMs: 300, ackAsync: true };

  test('an ack refused for a lapsed lease is reported, and the message comes again', async () => {
    const queue = uniqueQueue('async-lapse');
    await pushSpread(queue, 1, 1);
    const stop = new AbortController();
    const deliveries = [];
    const errors = [];
    const totals = await client.consume(queue, slowFirst(stop, deliveries), {
      ...LAPSING, signal: stop.signal, onAckError: (e) => errors.push(e),
    });
    assert.deepEqual(deliveries.map((m) => [m.offset, m.redelivered]), [[0, false], [0, true]]);
    assert.equal(errors.length, 1);
    assert.ok(errors[0] instanceof AckError);
    assert.deepEqual(errors[0].codes, ['lease_expired']);
    assert.equal(errors[0].items[0].offset, 0);
    // The handler's outcomes: it returned twice (the refused ack's message came again).
    assert.deepEqual(totals, { completed: 2, failed: 0 });
    await assertConsumed(queue, 'g');
  });

  test('without onAckError a failed ack ends consume()', async () => {
    const queue = uniqueQueue('async-lapse-throw');
    await pushSpread(queue, 1, 1);
    const stop = new AbortController();
    await assert.rejects(
      client.consume(queue, slowFirst(stop, []), { ...LAPSING, signal: stop.signal }),
      (err) => err instanceof AckError && err.codes[0] === 'lease_expired',
    );
  });

  test('messages() refuses ackAsync', () => {
    assert.throws(() => client.messages('q', { ackAsync: true }), TypeError);
  });
});
