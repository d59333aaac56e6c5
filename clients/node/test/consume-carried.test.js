// consume() without ackAsync: each batch's acks go with the next pop
// (ackAndPop). The client's calls are counted by wrapping its methods, as
// the ackAsync tests do; a fake sidecar shows a pop failing after the acks.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { connect } from '../src/index.js';
import { errorFrame, fakeSidecar, resultFrame } from './fake-sidecar.js';
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
  const items = [];
  for (let i = 0; i < n; i++) items.push({ queue, partition: `p${i % partitions}`, payload: i, transactionId: `m-${i}` });
  const results = await client.push(items);
  assert.ok(results.every((r) => r.status === 'queued'));
}

// Wraps c's pop, ack and ackAndPop: per method, one element per call (the
// number of ack items it carried, 0 for pop).
function countCalls(c) {
  const calls = { pop: [], ack: [], ackAndPop: [] };
  for (const name of Object.keys(calls)) {
    const real = c[name].bind(c);
    c[name] = (first, ...rest) => {
      calls[name].push(name === 'pop' ? 0 : [first].flat().length);
      return real(first, ...rest);
    };
  }
  return calls;
}

const sum = (list) => list.reduce((a, b) => a + b, 0);

async function assertConsumed(queue, group) {
  const groups = await client.groups(queue);
  assert.equal(groups.find((x) => x.group === group).lag, 0);
  const rest = await client.pop(queue, { group, batch: 100, partitions: 100 });
  assert.equal(rest.messages.length, 0);
}

describe('consume() carrying acks on the next pop', () => {
  test('one request a batch: the acks ride on the next pop, the last go on their own', async () => {
    const queue = uniqueQueue('carried');
    const n = 200;
    await pushSpread(queue, n, 5);
    const c = await connect({ socket: sidecars.socket });
    const calls = countCalls(c);
    const stop = new AbortController();
    const seen = new Map();
    const leases = new Set();
    try {
      const totals = await c.consume(queue, (m) => {
        seen.set(m.transactionId, (seen.get(m.transactionId) ?? 0) + 1);
        leases.add(m.leaseId);
        if (seen.size === n) stop.abort();
      }, { group: 'g', batch: 10, waitMs: 500, signal: stop.signal });
      assert.equal(seen.size, n);
      assert.ok([...seen.values()].every((k) => k === 1), 'a message was handled twice');
      assert.deepEqual(totals, { completed: n, failed: 0 });
      assert.equal(calls.pop.length, 1, 'one pop to start');
      assert.equal(calls.ackAndPop.length, leases.size - 1, 'then one request a batch');
      assert.deepEqual(calls.ack, [10], 'the last batch acked when the loop stopped');
      assert.equal(sum(calls.ackAndPop) + sum(calls.ack), n);
    } finally {
      await c.close();
    }
    await assertConsumed(queue, 'g');
  });

  test('a failure rides on the next pop, which brings the message again', async () => {
    const queue = uniqueQueue('carried-fail');
    await pushSpread(queue, 6, 1);
    const c = await connect({ socket: sidecars.socket });
    const calls = countCalls(c);
    const stop = new AbortController();
    const handled = [];
    try {
      const totals = await c.consume(queue, (m) => {
        handled.push([m.offset, m.redelivered]);
        if (m.offset === 2 && !m.redelivered) throw new Error('once');
        if (m.offset === 5) stop.abort();
      }, { group: 'g', batch: 10, waitMs: 500, signal: stop.signal });
      // The rewind is applied before the carried pop looks.
      assert.deepEqual(handled, [[0, false], [1, false], [2, false], [2, true], [3, true], [4, true], [5, true]]);
      assert.deepEqual(totals, { completed: 6, failed: 1 });
      assert.deepEqual([calls.ackAndPop, calls.ack], [[3], [4]]);
    } finally {
      await c.close();
    }
    await assertConsumed(queue, 'g');
  });

  test('with concurrency, a pop\'s partitions are handled at once and its acks ride on the next pop; every message once', async () => {
    const queue = uniqueQueue('carried-parallel');
    const n = 300;
    await pushSpread(queue, n, 30); // 10 a partition: a pop of 30 leases 3 of them
    const c = await connect({ socket: sidecars.socket });
    const calls = countCalls(c);
    const stop = new AbortController();
    const seen = new Map();
    const running = new Set();
    let most = 0;
    try {
      const totals = await c.consume(queue, async (m) => {
        assert.ok(!running.has(m.partition), `two handlers in partition ${m.partition}`);
        running.add(m.partition);
        most = Math.max(most, running.size);
        seen.set(m.transactionId, (seen.get(m.transactionId) ?? 0) + 1);
        await sleep(1);
        running.delete(m.partition);
        if (seen.size === n) stop.abort();
      }, { group: 'g', batch: 30, concurrency: 3, waitMs: 300, signal: stop.signal });
      assert.ok(most >= 2, `${most} handlers at once`);
      assert.equal(seen.size, n);
      assert.ok([...seen.values()].every((k) => k === 1), 'a message was handled twice');
      assert.deepEqual(totals, { completed: n, failed: 0 });
      assert.ok(calls.ack.length <= 1, `${calls.ack.length} plain acks: at most one, when the loop stops`);
      assert.equal(sum(calls.ackAndPop) + sum(calls.ack), n);
      assert.ok(calls.ackAndPop.length > calls.pop.length);
    } finally {
      await c.close();
    }
    await assertConsumed(queue, 'g');
  });

  test('a carried ack refused for a lapsed lease: its message comes again, and is handled again', async () => {
    const queue = uniqueQueue('carried-lapse');
    await pushSpread(queue, 1, 1);
    const stop = new AbortController();
    const deliveries = [];
    const totals = await client.consume(queue, async (m) => {
      deliveries.push([m.offset, m.redelivered]);
      if (deliveries.length === 1) await sleep(1500); // past the 1 s lease, not renewed
      else stop.abort();
    }, { group: 'g', batch: 1, leaseSeconds: 1, renewEveryMs: 3_600_000, waitMs: 300, signal: stop.signal });
    assert.deepEqual(deliveries, [[0, false], [0, true]]);
    assert.deepEqual(totals, { completed: 2, failed: 0 }); // the handler returned twice
    await assertConsumed(queue, 'g');
  });
});

describe('consume() carrying acks, against a scripted sidecar', () => {
  const NOW = new Date();
  const LEASE = { leaseId: 'L1', queue: 'q', partition: 'p', group: '', fromOffset: 0, toOffset: 0, expiresAt: new Date(NOW.getTime() + 60_000), headAttempts: 1 };
  const MESSAGE = { queue: 'q', partition: 'p', offset: 0, messageId: 'm0', transactionId: 't0', payload: 'x', committedAt: NOW, leaseId: 'L1', redelivered: false };

  test('a pop that fails after the acks is a failed pop: a pause, then a pop on its own', async () => {
    const at = [];
    const fake = await fakeSidecar((n, req) => {
      at.push(Date.now());
      if (n === 1) return [resultFrame(req, { messages: [MESSAGE], leases: [LEASE] })];
      if (req.op === 'ack') {
        return [resultFrame(req, {
          results: [{ index: 0, success: true }],
          leases: [{ leaseId: 'L1', released: true, cursor: 1 }],
          pop: { messages: [], leases: [] },
          popError: { code: 'overloaded', message: 'the next message does not fit', retryable: true },
        })];
      }
      return [errorFrame(req, 'overloaded')];
    });
    const c = await connect({ socket: fake.socket, hello: false, retry: false });
    const stop = new AbortController();
    const timer = setTimeout(() => stop.abort(), 1000);
    try {
      const totals = await c.consume('q', () => {}, { waitMs: 200, signal: stop.signal });
      assert.deepEqual(totals, { completed: 1, failed: 0 }, 'the acks were applied');
      assert.deepEqual(fake.ops.slice(0, 3), ['pop', 'ack', 'pop']);
      assert.ok(fake.ops.slice(2).every((op) => op === 'pop'), 'no plain ack: nothing was left to send');
      assert.ok(fake.requests[1].args.pop, 'the ack carried the pop');
      assert.ok(at[2] - at[1] >= 200, `paused ${at[2] - at[1]} ms before popping again`);
    } finally {
      clearTimeout(timer);
      await c.close();
      await fake.close();
    }
  });
});
