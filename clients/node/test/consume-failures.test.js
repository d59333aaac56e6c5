// consume() when a handler fails: the failure is logged, and the message is
// held for a growing delay, its lease renewed, before the failure is acked;
// the retry budget is charged as without the delay. And acks the sidecar
// refuses: logged, except already_acked, which lost nothing.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { AckError, connect } from '../src/index.js';
import { fakeSidecar, resultFrame } from './fake-sidecar.js';
import { REPO_ROOT, testSidecars, uniqueQueue } from './harness.js';

const cases = JSON.parse(readFileSync(`${REPO_ROOT}clients/testdata/cases.json`, 'utf8'));

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

function recorder() {
  const lines = [];
  return { lines, logger: { warn: (line) => lines.push(line) } };
}

async function pushAll(queue, payloads, partition = 'p') {
  const results = await client.push(payloads.map((payload) => ({ queue, partition, payload })));
  assert.ok(results.every((r) => r.status === 'queued'));
}

describe('a handler that fails', () => {
  test('is logged with queue, partition, offset, error, failures and delay; the message waits, its lease kept', async () => {
    const queue = uniqueQueue('held');
    await client.configure(queue, { leaseSeconds: 1 });
    await pushAll(queue, ['a']);
    const stop = new AbortController();
    const { lines, logger } = recorder();
    const calls = [];
    let stolen;
    const totals = await client.consume(queue, (msg) => {
      calls.push(Date.now());
      if (calls.length === 1) {
        // Past the 1 s lease, within the wait: the lease must still be held.
        setTimeout(async () => { stolen = await client.pop(queue, { group: 'g' }); }, 1500);
        throw new Error('boom');
      }
      assert.equal(msg.redelivered, true);
      stop.abort();
    }, { group: 'g', waitMs: 200, failureBackoff: { initialMs: 2500 }, logger, signal: stop.signal });
    assert.ok(calls[1] - calls[0] >= 2500, `redelivered after ${calls[1] - calls[0]} ms`);
    assert.deepEqual(stolen?.messages, [], 'another consumer got nothing while the failure was held');
    assert.equal(lines.length, 1);
    assert.match(lines[0], new RegExp(`queue ${queue}, partition p, offset 0, failure 1\\): Error: boom; retrying in 2500 ms`));
    assert.deepEqual(totals, { completed: 1, failed: 1 });
  });

  test('the delay grows with the message\'s failures; the retry budget is charged once per failure', async () => {
    const queue = uniqueQueue('growing');
    await client.configure(queue, { retryLimit: 2 });
    await pushAll(queue, ['x']);
    const stop = new AbortController();
    const { lines, logger } = recorder();
    const calls = [];
    const watching = (async () => {
      while ((await client.dlq(queue)).entries.length === 0) await sleep(100);
      stop.abort();
    })();
    const totals = await client.consume(queue, () => {
      calls.push(Date.now());
      throw new Error(`failure ${calls.length}`);
    }, { group: 'g', waitMs: 200, failureBackoff: { initialMs: 300, maxMs: 500 }, logger, signal: stop.signal });
    await watching;
    assert.equal(calls.length, 3, 'retryLimit 2: the third failure dead-letters it');
    assert.deepEqual(totals, { completed: 0, failed: 3 });
    assert.deepEqual(lines.map((l) => /failure (\d+)\): .* retrying in (\d+) ms/.exec(l).slice(1).map(Number)), [[1, 300], [2, 500], [3, 500]]);
    assert.ok(calls[1] - calls[0] >= 300, `first wait ${calls[1] - calls[0]} ms`);
    assert.ok(calls[2] - calls[1] >= 500, `second wait ${calls[2] - calls[1]} ms`);
    const [entry] = (await client.dlq(queue)).entries;
    assert.equal(entry.failures, 3);
    assert.equal(entry.error, 'failure 3');
  });

  test('a stop during the wait ends it at once: the failure is acked, and the message comes again at once', async () => {
    const queue = uniqueQueue('stop-waiting');
    await pushAll(queue, ['a', 'b']);
    const stop = new AbortController();
    let stoppedAt;
    const logger = { warn: () => setTimeout(() => { stoppedAt = Date.now(); stop.abort(); }, 200) };
    const totals = await client.consume(queue, () => { throw new Error('no'); }, {
      group: 'g', batch: 2, waitMs: 200, failureBackoff: { initialMs: 30_000 }, logger, signal: stop.signal,
    });
    const took = Date.now() - stoppedAt;
    assert.ok(took < 1000, `the stop took ${took} ms`);
    assert.deepEqual(totals, { completed: 0, failed: 1 });
    const { messages } = await client.pop(queue, { group: 'g', batch: 2 });
    assert.deepEqual(messages.map((m) => [m.payload, m.redelivered]), [['a', true], ['b', true]]);
  });

  test('by default: logged with console.warn, and held for the shared initial delay', async () => {
    const queue = uniqueQueue('defaults');
    await pushAll(queue, ['a']);
    const stop = new AbortController();
    const calls = [];
    const warned = [];
    const warn = console.warn;
    console.warn = (...args) => warned.push(args.join(' '));
    try {
      await client.consume(queue, () => {
        calls.push(Date.now());
        if (calls.length === 1) throw new Error('once');
        stop.abort();
      }, { group: 'g', waitMs: 200, signal: stop.signal });
    } finally {
      console.warn = warn;
    }
    const initialMs = cases.consumeDefaults.failureBackoff.initialMs;
    assert.ok(calls[1] - calls[0] >= initialMs, `redelivered after ${calls[1] - calls[0]} ms`);
    assert.equal(warned.length, 1);
    assert.match(warned[0], new RegExp(`^queenside: handler failed \\(queue ${queue}, partition p, offset 0, failure 1\\): Error: once; retrying in ${initialMs} ms`));
  });

  test('failureBackoff: false acks the failure without waiting', async () => {
    const queue = uniqueQueue('no-backoff');
    await pushAll(queue, ['a']);
    const stop = new AbortController();
    const { lines, logger } = recorder();
    let calls = 0;
    await client.consume(queue, () => {
      if (++calls === 1) throw new Error('once');
      stop.abort();
    }, { group: 'g', waitMs: 200, failureBackoff: false, logger, signal: stop.signal });
    assert.match(lines[0], /retrying in 0 ms/);
  });

  test('a failureBackoff that is not a pair of durations is refused', async () => {
    for (const failureBackoff of [{ initialMs: -1 }, { maxMs: 'soon' }, { initialMs: 1, max: 2 }]) {
      await assert.rejects(client.consume('q', () => {}, { failureBackoff }), TypeError);
    }
  });
});

describe('acks the sidecar refuses, against a scripted sidecar', () => {
  const NOW = new Date();
  const LEASE = { leaseId: 'L1', queue: 'q', partition: 'p', group: 'g', fromOffset: 0, toOffset: 0, expiresAt: new Date(NOW.getTime() + 60_000), headAttempts: 1 };
  const MESSAGE = { queue: 'q', partition: 'p', offset: 0, messageId: 'm0', transactionId: 't0', payload: 'x', committedAt: NOW, leaseId: 'L1', redelivered: false };

  // Pops one message, then nothing; answers its ack with code.
  async function scripted(code, options) {
    const fake = await fakeSidecar((n, req) => {
      if (n === 1) return [resultFrame(req, { messages: [MESSAGE], leases: [LEASE] })];
      const empty = { messages: [], leases: [] };
      if (req.op !== 'ack') return [resultFrame(req, empty)];
      const answer = { results: [{ index: 0, success: false, code }], leases: [] };
      return [resultFrame(req, req.args.pop ? { ...answer, pop: empty } : answer)];
    });
    const c = await connect({ socket: fake.socket, hello: false, retry: false });
    const stop = new AbortController();
    const { lines, logger } = recorder();
    const watching = (async () => {
      while (!fake.ops.includes('ack')) await sleep(10);
      await sleep(50);
      stop.abort();
    })();
    try {
      return { lines, result: await c.consume('q', () => {}, { group: 'g', waitMs: 100, ...options, logger, signal: stop.signal }) };
    } finally {
      await watching;
      await c.close();
      await fake.close();
    }
  }

  for (const [mode, options] of [['acks carried by the next pop', {}], ['ackAsync', { ackAsync: true }]]) {
    test(`${mode}: already_acked is neither lost nor warned about`, async () => {
      const { lines, result } = await scripted('already_acked', options);
      assert.deepEqual(result, { completed: 1, failed: 0 });
      assert.deepEqual(lines, []);
    });
  }

  test('acks carried by the next pop: lease_expired is logged in words', async () => {
    const { lines, result } = await scripted('lease_expired', {});
    assert.deepEqual(result, { completed: 1, failed: 0 }); // the handler's outcome
    assert.equal(lines.length, 1);
    assert.match(lines[0], /^queenside: ack item 0: lease expired \(lease_expired\), queue q, partition p, offset 0: the message will be delivered again$/);
  });

  test('ackAsync: lease_expired ends consume() with an AckError that says it in words', async () => {
    await assert.rejects(scripted('lease_expired', { ackAsync: true }), (err) => {
      assert.ok(err instanceof AckError);
      assert.deepEqual(err.codes, ['lease_expired']);
      assert.match(err.message, /^ack item 0: lease expired \(lease_expired\); those messages will be delivered again$/);
      return true;
    });
  });
});
