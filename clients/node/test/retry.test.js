// Retries of unavailable and draining answers (src/retry.js), against a
// scripted sidecar, and against a real one whose database cannot be reached.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { join } from 'node:path';
import { DrainingError, QueensideError, UnavailableError, connect } from '../src/index.js';
import { DRAINING_NOTICE, errorFrame, failFirst, fakeSidecar } from './fake-sidecar.js';
import { startServe, testSidecars } from './harness.js';

const MESSAGE = { queue: 'q', partition: 'Default', offset: 3, messageId: 'm3', transactionId: 't3', leaseId: 'lease-1' };

async function withFake(script, options, body) {
  const fake = await fakeSidecar(script);
  const client = await connect({ socket: fake.socket, hello: false, ...options });
  try {
    return await body(client, fake);
  } finally {
    await client.close();
    await fake.close();
  }
}

async function rejection(promise) {
  return promise.then((v) => assert.fail(`resolved with ${JSON.stringify(v)}`), (e) => e);
}

// Each operation, answered unavailable once: sent again only if a repeat
// cannot do more than the first would have.
const CASES = [
  ['configure', (c) => c.configure('q', { retryLimit: 5 }), true],
  ['stats', (c) => c.stats('q'), true],
  ['queues', (c) => c.queues(), true],
  ['groups', (c) => c.groups('q'), true],
  ['dlq', (c) => c.dlq('q'), true],
  ['health', (c) => c.health(), true],
  ['hello', (c) => c.hello(), true],
  ['maintenance read', (c) => c.call('maintenance', {}), true],
  ['push with transaction ids', (c) => c.push([{ queue: 'q', payload: 1, transactionId: 'a' }, { queue: 'q', payload: 2, transactionId: 'b' }]), true],
  ['push with a generated id', (c) => c.push([{ queue: 'q', payload: 1, transactionId: 'a' }, { queue: 'q', payload: 2 }]), false],
  ['pop', (c) => c.pop('q'), false],
  ['ack', (c) => c.ack([MESSAGE]), false],
  ['renew', (c) => c.renew(['lease-1']), false],
  ['release', (c) => c.release(['lease-1']), false],
  ['transaction', (c) => c.transaction({ acks: [MESSAGE], pushes: [{ queue: 'q', payload: 1, transactionId: 'a' }] }), false],
  ['seek', (c) => c.seek('q', 'g', 'end'), false],
  ['deleteGroup', (c) => c.deleteGroup('q', 'g'), false],
  ['dlqReplay', (c) => c.dlqReplay([1]), false],
  ['dlqReplay by filter', (c) => c.dlqReplayBatch({ queue: 'q' }), false],
  ['dlqDelete', (c) => c.dlqDelete({ ids: [1] }), false],
  ['dlqSummary', (c) => c.dlqSummary('q'), true],
  ['maintenance change', (c) => c.call('maintenance', { push: true }), false],
];

describe('unavailable is retried only where a repeat cannot do harm', () => {
  for (const [name, call, retried] of CASES) {
    test(name, () => withFake(failFirst(1, 'unavailable'), {}, async (client, fake) => {
      if (retried) {
        await call(client);
        assert.deepEqual(fake.ops, [fake.ops[0], fake.ops[0]]);
      } else {
        assert.ok(await rejection(call(client)) instanceof UnavailableError);
        assert.equal(fake.requests.length, 1, `${fake.ops}: a call that may have had an effect was sent again`);
      }
    }));
  }
});

describe('retries', () => {
  test('configure is sent again until it is answered', () => withFake(failFirst(2, 'unavailable'), {}, async (client, fake) => {
    await client.configure('q', { retryLimit: 5 });
    assert.deepEqual(fake.ops, ['configure', 'configure', 'configure']);
    assert.deepEqual(fake.requests.map((r) => r.args.options.retryLimit), [5, 5, 5]);
  }));

  test('draining is retried, even a pop, until the notice', async () => {
    await withFake(failFirst(1, 'draining'), {}, async (client, fake) => {
      assert.deepEqual((await client.pop('q')).messages, undefined); // the scripted result is empty
      assert.deepEqual(fake.ops, ['pop', 'pop']);
    });
    // Once the connection got the notice, no answer on it will change.
    const noticeThenDraining = (_n, request) => [DRAINING_NOTICE, errorFrame(request, 'draining')];
    await withFake(noticeThenDraining, {}, async (client, fake) => {
      assert.ok(await rejection(client.stats('q')) instanceof DrainingError);
      assert.equal(client.draining, true);
      assert.equal(fake.requests.length, 1);
    });
  });

  test('other codes go to the caller', async () => {
    for (const code of ['overloaded', 'internal', 'deadline_exceeded', 'invalid_argument']) {
      await withFake(failFirst(1, code), {}, async (client, fake) => {
        const err = await rejection(client.stats('q'));
        assert.ok(err instanceof QueensideError && err.code === code, String(err));
        assert.equal(fake.requests.length, 1);
      });
    }
  });

  test('retries end with the call\'s timeoutMs, each attempt sending what is left', () =>
    withFake(failFirst(1 << 30, 'unavailable'), {}, async (client, fake) => {
      const start = Date.now();
      assert.ok(await rejection(client.stats('q', { timeoutMs: 600 })) instanceof UnavailableError);
      const took = Date.now() - start;
      // 50 ms doubling, each pause from half to all of it: attempts at about
      // 0, 50, 150 and 350 ms at the latest fit in 600 ms. No attempt starts
      // after the timeout; the last may end a little after it.
      assert.ok(fake.requests.length >= 4 && took < 700, `${fake.requests.length} attempts in ${took} ms`);
      const timeouts = fake.requests.map((r) => r.timeoutMs);
      assert.equal(timeouts[0], 600);
      assert.ok(timeouts.slice(1).every((t) => t < 600), String(timeouts));
    }));

  test('without timeoutMs, retries end after maxElapsedMs', () =>
    withFake(failFirst(1 << 30, 'unavailable'), { retry: { maxElapsedMs: 400 } }, async (client, fake) => {
      const start = Date.now();
      assert.ok(await rejection(client.queues()) instanceof UnavailableError);
      const took = Date.now() - start;
      assert.ok(fake.requests.length >= 3 && took < 500, `${fake.requests.length} attempts in ${took} ms`);
      assert.ok(fake.requests.every((r) => r.timeoutMs === undefined));
    }));

  test('aborting ends a pause at once', () =>
    withFake(failFirst(1 << 30, 'unavailable'), { retry: { initialDelayMs: 4000, maxElapsedMs: 20000 } }, async (client, fake) => {
      const abort = new AbortController();
      setTimeout(() => abort.abort(new Error('stop')), 100);
      const start = Date.now();
      const err = await rejection(client.stats('q', { signal: abort.signal }));
      assert.equal(err.message, 'stop');
      assert.ok(Date.now() - start < 600);
      assert.equal(fake.requests.length, 1);
    }));

  test('retry: false sends once', () => withFake(failFirst(1, 'unavailable'), { retry: false }, async (client, fake) => {
    assert.ok(await rejection(client.configure('q')) instanceof UnavailableError);
    assert.equal(fake.requests.length, 1);
  }));

  test('a bad retry option fails before connecting', async () => {
    await assert.rejects(connect({ socket: '/nonexistent', retry: { maxDelayMs: -1 } }), TypeError);
  });
});

describe('against a sidecar whose database cannot be reached', () => {
  let sidecars;
  let down;
  before(async () => {
    sidecars = await testSidecars();
    down = await startServe(sidecars.bin, sidecars.dir, {
      name: `retry-down-${process.pid}`,
      databaseUrl: `postgres://postgres@/none?host=${join(sidecars.dir, 'no-postgres-here')}&connect_timeout=1`,
      healthy: false,
    });
  });
  after(async () => {
    await down?.stop();
    await sidecars?.stop();
  });

  test('stats is retried until its timeout; pop fails at once', async () => {
    const c = await connect({ socket: down.socket });
    try {
      let start = Date.now();
      assert.ok(await rejection(c.stats('anything', { timeoutMs: 800 })) instanceof UnavailableError);
      const retried = Date.now() - start;
      start = Date.now();
      assert.ok(await rejection(c.pop('anything', { timeoutMs: 800 })) instanceof UnavailableError);
      const once = Date.now() - start;
      assert.ok(retried >= 350, `stats failed after ${retried} ms: it was not retried`);
      assert.ok(once < 300, `pop failed after ${once} ms: it must not be retried`);
    } finally {
      await c.close();
    }
  });
});
