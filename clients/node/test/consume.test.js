// Consumption: the async iterator's rules for when a message is done, and
// consume() with failures, redelivery, lease renewal, stopping and
// concurrency.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { connect } from '../src/index.js';
import { fakeSidecar, resultFrame } from './fake-sidecar.js';
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

async function pushAll(queue, payloads, partition) {
  const results = await client.push(payloads.map((payload) => ({ queue, partition, payload })));
  assert.ok(results.every((r) => r.status === 'queued'));
}

async function lagOf(queue, group) {
  const groups = await client.groups(queue);
  return groups.find((g) => g.group === group)?.lag;
}

const FAST = { waitMs: 200 };
// Failures retried without the default second of backoff, and not logged.
const QUICK_RETRY = { failureBackoff: { initialMs: 20 }, logger: { warn() {} } };

describe('messages() iterator', () => {
  test('a message is completed when the loop asks for the next one', async () => {
    const queue = uniqueQueue('iter');
    await pushAll(queue, [0, 1, 2, 3, 4]);
    const stop = new AbortController();
    const seen = [];
    const iterator = client.messages(queue, { group: 'g', batch: 2, ...FAST, signal: stop.signal });
    for await (const msg of iterator) {
      seen.push(msg.payload);
      if (seen.length === 5) stop.abort();
    }
    assert.deepEqual(seen, [0, 1, 2, 3, 4]);
    assert.deepEqual(iterator.totals, { completed: 5, failed: 0 });
    assert.equal(await lagOf(queue, 'g'), 0);
  });

  test('a loop body that throws fails the message in hand (charged: it can be dead-lettered)', async () => {
    const queue = uniqueQueue('iter-throw');
    await client.configure(queue, { retryLimit: 0 });
    await pushAll(queue, ['poison', 'fine']);
    await assert.rejects(async () => {
      for await (const msg of client.messages(queue, { group: 'g', batch: 2, ...FAST })) {
        throw new Error(`cannot handle ${msg.payload}`);
      }
    }, /cannot handle poison/);
    const { entries } = await client.dlq(queue, { group: 'g' });
    assert.equal(entries.length, 1);
    assert.equal(entries[0].payload, 'poison');
    assert.match(entries[0].error, /loop over messages ended/);
    const { messages } = await client.pop(queue, { group: 'g', autoAck: true });
    assert.equal(messages[0].payload, 'fine', 'the rest of the batch was handed back');
  });

  test('break after msg.complete() keeps the message done; break without it gives it back', async () => {
    const queue = uniqueQueue('iter-break');
    await pushAll(queue, ['a', 'b', 'c']);
    for await (const msg of client.messages(queue, { group: 'g', batch: 3, ...FAST })) {
      assert.equal(msg.payload, 'a');
      msg.complete();
      break;
    }
    for await (const msg of client.messages(queue, { group: 'g', batch: 3, ...FAST })) {
      assert.equal(msg.payload, 'b');
      break; // b counts failed, and comes again
    }
    const { messages } = await client.pop(queue, { group: 'g', batch: 3, autoAck: true });
    assert.deepEqual(messages.map((m) => [m.payload, m.redelivered]), [['b', true], ['c', true]]);
  });

  test('msg.fail() sends the message and the rest of its lease round again', async () => {
    const queue = uniqueQueue('iter-fail');
    await pushAll(queue, ['a', 'b', 'c']);
    const stop = new AbortController();
    const seen = [];
    for await (const msg of client.messages(queue, { group: 'g', batch: 3, ...FAST, signal: stop.signal })) {
      seen.push(`${msg.payload}${msg.redelivered ? '*' : ''}`);
      if (msg.payload === 'b' && !msg.redelivered) msg.fail(new Error('try again'));
      if (msg.payload === 'c') stop.abort();
    }
    assert.deepEqual(seen, ['a', 'b', 'b*', 'c*']);
    assert.equal(await lagOf(queue, 'g'), 0);
  });
});

describe('consume()', () => {
  test('a handler that fails once succeeds on redelivery', async () => {
    const queue = uniqueQueue('consume');
    await pushAll(queue, [0, 1, 2, 3, 4], 'left');
    await pushAll(queue, [5, 6, 7, 8, 9], 'right');
    const stop = new AbortController();
    const handled = new Map();
    let failures = 0;
    const totals = await client.consume(queue, async (msg) => {
      if (msg.payload === 3 && failures === 0) {
        failures++;
        throw new Error('flaky downstream');
      }
      handled.set(msg.payload, msg.redelivered);
      if (handled.size === 10) stop.abort();
    }, { group: 'workers', batch: 5, partitions: 2, ...FAST, ...QUICK_RETRY, signal: stop.signal });
    assert.deepEqual([...handled.keys()].sort((a, b) => a - b), [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    assert.equal(handled.get(3), true, 'the failed message came again');
    assert.deepEqual(totals, { completed: 10, failed: 1 });
    assert.equal(await lagOf(queue, 'workers'), 0);
  });

  test('leases are renewed while a handler runs longer than the lease', async () => {
    const queue = uniqueQueue('renewing');
    await client.configure(queue, { leaseSeconds: 1 });
    await pushAll(queue, ['slow']);
    const stop = new AbortController();
    let stolen;
    const totals = await client.consume(queue, async () => {
      await sleep(2500);
      // Had the 1 s lease lapsed, this pop of the same group would get it.
      stolen = await client.pop(queue, { group: 'g' });
      stop.abort();
    }, { group: 'g', ...FAST, signal: stop.signal });
    assert.deepEqual(stolen.messages, []);
    assert.deepEqual(totals, { completed: 1, failed: 0 });
  });

  test('stopping finishes the message in hand and releases the rest at once', async () => {
    const queue = uniqueQueue('stopping');
    await pushAll(queue, [1, 2, 3, 4, 5]);
    const stop = new AbortController();
    const seen = [];
    const totals = await client.consume(queue, async (msg, { signal }) => {
      seen.push(msg.payload);
      if (msg.payload === 2) stop.abort();
      assert.equal(signal.aborted, msg.payload === 2);
    }, { group: 'g', batch: 5, ...FAST, signal: stop.signal });
    assert.deepEqual(seen, [1, 2]);
    assert.deepEqual(totals, { completed: 2, failed: 0 });
    const { messages } = await client.pop(queue, { group: 'g', batch: 5, autoAck: true });
    assert.deepEqual(messages.map((m) => m.payload), [3, 4, 5], 'no wait for a lease to expire');
  });

  test('SIGINT stops it cleanly by default, and the previous handling is back at once', async () => {
    const queue = uniqueQueue('sigint');
    const listenersBefore = process.listenerCount('SIGINT');
    const running = client.consume(queue, () => {}, FAST);
    await sleep(100);
    assert.equal(process.listenerCount('SIGINT'), listenersBefore + 1);
    process.emit('SIGINT', 'SIGINT');
    assert.equal(process.listenerCount('SIGINT'), listenersBefore, 'a second Ctrl-C acts as it would without consume()');
    assert.deepEqual(await running, { completed: 0, failed: 0 });
  });

  test('stopOnSignals: false leaves the process signals alone', async () => {
    const queue = uniqueQueue('no-signals');
    const stop = new AbortController();
    const listenersBefore = ['SIGINT', 'SIGTERM'].map((s) => process.listenerCount(s));
    const running = client.consume(queue, () => {}, { ...FAST, stopOnSignals: false, signal: stop.signal });
    await sleep(100);
    assert.deepEqual(['SIGINT', 'SIGTERM'].map((s) => process.listenerCount(s)), listenersBefore);
    stop.abort();
    await running;
  });

  test('loops started together share one listener; one signal stops them all', async () => {
    const listenersBefore = process.listenerCount('SIGINT');
    const running = [1, 2, 3].map(() => client.consume(uniqueQueue('shared-signal'), () => {}, FAST));
    const iterator = client.messages(uniqueQueue('shared-signal'), FAST);
    const iterating = (async () => { for await (const msg of iterator) assert.fail(`nothing was pushed: ${msg}`); })();
    await sleep(100);
    assert.equal(process.listenerCount('SIGINT'), listenersBefore + 1);
    process.emit('SIGINT', 'SIGINT');
    await Promise.all([...running, iterating]);
    assert.equal(process.listenerCount('SIGINT'), listenersBefore);
  });

  test('a stop does not wait out the long-poll in flight', async () => {
    const queue = uniqueQueue('long-poll');
    const stop = new AbortController();
    const running = client.consume(queue, () => {}, { group: 'g', waitMs: 30_000, signal: stop.signal });
    await sleep(300); // the pop is waiting
    const stoppedAt = Date.now();
    stop.abort();
    await running;
    const took = Date.now() - stoppedAt;
    assert.ok(took < 1000, `stopping took ${took} ms`);
  });

  test('no handler: refused at once, before any request', async () => {
    const fake = await fakeSidecar((_, req) => [resultFrame(req, { messages: [], leases: [] })]);
    const c = await connect({ socket: fake.socket, hello: false });
    try {
      for (const handler of [undefined, null, 'handle', { handle() {} }]) {
        await assert.rejects(c.consume('q', handler, FAST), (err) => err instanceof TypeError && /^consume needs a handler/.test(err.message));
      }
      // The handler left out, the options in its place.
      await assert.rejects(c.consume('q', { group: 'g' }), /consume needs a handler/);
      assert.deepEqual(fake.ops, []);
    } finally {
      await c.close();
      await fake.close();
    }
  });

  test('an error that retrying cannot fix rejects consume()', async () => {
    await assert.rejects(client.consume('not a valid queue name!', () => {}, FAST), { code: 'invalid_argument' });
  });
});

// 8 partitions of 5 messages each, pushed before consuming: with the
// defaults (100 messages from 100 partitions a pop) one pop takes them all.
const PARTITIONS = ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'];
const PER_PARTITION = 5;
const TOTAL = PARTITIONS.length * PER_PARTITION;

async function pushPartitions(queue) {
  const items = [];
  for (const p of PARTITIONS) for (let n = 0; n < PER_PARTITION; n++) items.push({ queue, partition: p, payload: `${p}${n}` });
  const results = await client.push(items);
  assert.ok(results.every((r) => r.status === 'queued'));
}

// A client of its own whose pops (plain and carried) are recorded: the
// messages each brought, in the order it returned them.
async function recordingClient() {
  const c = await connect({ socket: sidecars.socket });
  const pops = [];
  const pop = c.pop.bind(c);
  c.pop = async (...args) => {
    const res = await pop(...args);
    pops.push(res.messages.map((m) => m.payload));
    return res;
  };
  const ackAndPop = c.ackAndPop.bind(c);
  c.ackAndPop = async (...args) => {
    const res = await ackAndPop(...args);
    pops.push(res.pop.messages.map((m) => m.payload));
    return res;
  };
  return { c, pops };
}

// A handler that awaits waitMs and records, per partition, the payloads in
// the order handled, how many handlers ran at most at once, and whether two
// ever ran in one partition. fail(msg) says whether to throw.
function watchingHandler({ stop, waitMs = 20, expected = TOTAL, fail = () => false }) {
  const running = new Set();
  const state = { most: 0, overlaps: 0, handled: 0, order: Object.fromEntries(PARTITIONS.map((p) => [p, []])), calls: [] };
  const handler = async (msg) => {
    if (running.has(msg.partition)) state.overlaps++;
    running.add(msg.partition);
    state.most = Math.max(state.most, running.size);
    state.calls.push(msg.payload);
    try {
      await sleep(waitMs);
      if (fail(msg)) throw new Error(`failing ${msg.payload} once`);
      state.order[msg.partition].push(msg.payload);
      if (++state.handled === expected) stop.abort();
    } finally {
      running.delete(msg.partition);
    }
  };
  return { handler, state };
}

function assertInOrder(order) {
  for (const p of PARTITIONS) {
    assert.deepEqual(order[p], Array.from({ length: PER_PARTITION }, (_, n) => `${p}${n}`), `partition ${p} in offset order, each once`);
  }
}

describe('consume() concurrency over the partitions of one pop', () => {
  test('concurrency 4: up to 4 handlers at once, never two of one partition, each partition in order', async () => {
    const queue = uniqueQueue('concurrent');
    await pushPartitions(queue);
    const { c, pops } = await recordingClient();
    const stop = new AbortController();
    const { handler, state } = watchingHandler({ stop });
    try {
      const totals = await c.consume(queue, handler, { group: 'g', concurrency: 4, ...FAST, signal: stop.signal });
      assert.equal(pops[0].length, TOTAL, 'one pop took every message');
      assert.equal(state.overlaps, 0, 'two handlers ran in one partition');
      assert.ok(state.most >= 2 && state.most <= 4, `${state.most} handlers at once`);
      assertInOrder(state.order);
      assert.deepEqual(totals, { completed: TOTAL, failed: 0 });
    } finally {
      await c.close();
    }
    assert.equal(await lagOf(queue, 'g'), 0);
  });

  test('the default concurrency handles one message at a time, in the order the pop returned them', async () => {
    const queue = uniqueQueue('one-at-a-time');
    await pushPartitions(queue);
    const { c, pops } = await recordingClient();
    const stop = new AbortController();
    const { handler, state } = watchingHandler({ stop, waitMs: 2 });
    try {
      const totals = await c.consume(queue, handler, { group: 'g', ...FAST, signal: stop.signal });
      assert.equal(pops[0].length, TOTAL, 'one pop took every message');
      assert.equal(state.most, 1);
      assert.deepEqual(state.calls, pops[0]);
      assertInOrder(state.order);
      assert.deepEqual(totals, { completed: TOTAL, failed: 0 });
    } finally {
      await c.close();
    }
    assert.equal(await lagOf(queue, 'g'), 0);
  });

  test('a failure in one partition is retried; the other partitions go on in order', async () => {
    const queue = uniqueQueue('concurrent-failure');
    await pushPartitions(queue);
    const stop = new AbortController();
    let failed = false;
    // c2 fails once: c2..c4 come again in a later pop, after its backoff.
    const fail = (msg) => {
      if (msg.payload !== 'c2' || failed) return false;
      failed = true;
      return true;
    };
    const { handler, state } = watchingHandler({ stop, fail });
    const totals = await client.consume(queue, handler, {
      group: 'g', concurrency: 4, ...FAST, ...QUICK_RETRY, signal: stop.signal,
    });
    assert.equal(state.overlaps, 0, 'two handlers ran in one partition');
    assert.ok(state.most >= 2);
    assertInOrder(state.order);
    assert.deepEqual(state.calls.filter((p) => p.startsWith('c')), ['c0', 'c1', 'c2', 'c2', 'c3', 'c4']);
    assert.deepEqual(totals, { completed: TOTAL, failed: 1 });
    assert.equal(await lagOf(queue, 'g'), 0);
  });

  test('a stop lets the handlers in hand finish, acks them, and releases the partitions not started', async () => {
    const queue = uniqueQueue('concurrent-stop');
    await pushPartitions(queue);
    const stop = new AbortController();
    const started = [];
    const totals = await client.consume(queue, async (msg) => {
      started.push(msg.payload);
      if (started.length === 2) stop.abort(); // the first two partitions are in hand
      await sleep(50);
    }, { group: 'g', concurrency: 2, ...FAST, signal: stop.signal });
    assert.equal(started.length, 2);
    const inHand = started.map((p) => p[0]);
    assert.notEqual(inHand[0], inHand[1]);
    assert.deepEqual(started.map((p) => p[1]), ['0', '0'], 'each the first of its partition');
    assert.deepEqual(totals, { completed: 2, failed: 0 });
    // Those two acked; everything else released at once, not left to expire.
    const { messages } = await client.pop(queue, { group: 'g', batch: 100, partitions: 100, autoAck: true });
    assert.equal(messages.length, TOTAL - 2);
    for (const p of PARTITIONS) {
      const rest = messages.filter((m) => m.partition === p).map((m) => m.payload);
      const from = inHand.includes(p) ? 1 : 0;
      assert.deepEqual(rest, Array.from({ length: PER_PARTITION - from }, (_, n) => `${p}${n + from}`));
    }
  });
});
