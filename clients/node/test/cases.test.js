// The cases the Go, Python and Node clients all check
// (clients/testdata/cases.json): the same call behaves the same in the
// three. Every case of the file that concerns this client is run; a section
// or a call this file does not know fails, so that a case added there
// cannot go unchecked here.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { ACK_ITEM_CODES, AckError, InvalidArgumentError, NotFoundError, connect, transactionId } from '../src/index.js';
import { CONSUME_DEFAULTS, MAX_CONCURRENCY, failureDelayMs } from '../src/consumer-options.js';
import { fakeSidecar, resultFrame } from './fake-sidecar.js';
import { REPO_ROOT, testSidecars, uniqueQueue } from './harness.js';

const cases = JSON.parse(readFileSync(`${REPO_ROOT}clients/testdata/cases.json`, 'utf8'));

const CHECKED = [
  'about', 'transactionIds', 'transactionIdRefusals', 'consumeDefaults', 'concurrencyMax', 'failureBackoffDelays',
  'pushRefusals', 'pushAccepted', 'unknownOptions',
];

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

// A part as the file writes it: a JSON string or integer, {bytes: hex}, or
// {int: decimal} for an integer a JSON number cannot hold exactly.
function part(p) {
  if (p === null || typeof p !== 'object') return p;
  if (typeof p.bytes === 'string') return Uint8Array.from(Buffer.from(p.bytes, 'hex'));
  if (typeof p.int === 'string') return BigInt(p.int);
  throw new Error(`a part this test cannot read: ${JSON.stringify(p)}`);
}

/** A sidecar that answers every request with an empty result, and counts them. */
async function withFake(fn) {
  const fake = await fakeSidecar((_, req) => [resultFrame(req, req.op === 'pop' ? { messages: [], leases: [] } : {})]);
  const c = await connect({ socket: fake.socket, hello: false, retry: false });
  try {
    await fn(c, fake);
  } finally {
    await c.close();
    await fake.close();
  }
}

test('every section of cases.json is checked here', () => {
  assert.deepEqual(Object.keys(cases).filter((k) => !CHECKED.includes(k)), []);
});

describe('transactionIds', () => {
  for (const c of cases.transactionIds) {
    test(`${JSON.stringify(c.parts)} gives ${c.id}`, () => {
      assert.equal(transactionId(...c.parts.map(part)), c.id);
    });
  }

  test('a Buffer is bytes as a Uint8Array is; a safe integer as a number or a bigint', () => {
    assert.equal(transactionId(Buffer.from('00ff', 'hex')), transactionId(Uint8Array.of(0, 255)));
    assert.equal(transactionId('order', 1n), transactionId('order', 1));
  });
});

describe('transactionIdRefusals', () => {
  for (const c of cases.transactionIdRefusals) {
    test(`refused: ${c.why}`, () => {
      assert.throws(() => transactionId(...c.parts.map(part)), (err) => {
        assert.ok(err instanceof TypeError, err);
        // The message names the part's position and what it is.
        if (c.parts.length > 0) assert.match(err.message, /part 0 is /);
        return true;
      });
    });
  }

  test('refused too: undefined, an object, an integer number beyond 2^53 (a bigint is taken)', () => {
    assert.throws(() => transactionId('a', undefined), /part 1 is undefined/);
    assert.throws(() => transactionId({ a: 1 }), /part 0 is an object/);
    assert.throws(() => transactionId(2 ** 53), /part 0 is an integer beyond 2\^53/);
    assert.match(transactionId(2n ** 53n), /^[0-9a-f]{32}$/);
  });
});

describe('consumeDefaults', () => {
  test('the client\'s defaults are the shared ones', () => {
    assert.deepEqual(CONSUME_DEFAULTS, cases.consumeDefaults);
  });

  test('consume() without options pops with batch, partitions and waitMs of the defaults', async () => {
    await withFake(async (c, fake) => {
      const stop = new AbortController();
      const running = c.consume('q', () => {}, { signal: stop.signal });
      while (!fake.ops.includes('pop')) await new Promise((r) => setTimeout(r, 10));
      stop.abort();
      await running;
      const { batch, partitions, waitMs } = fake.requests.find((r) => r.op === 'pop').args;
      const want = cases.consumeDefaults;
      assert.deepEqual({ batch, partitions, waitMs }, { batch: want.batch, partitions: want.partitions, waitMs: want.waitMs });
    });
  });

  test('a concurrency above concurrencyMax is refused before anything is sent', async () => {
    assert.equal(MAX_CONCURRENCY, cases.concurrencyMax);
    await withFake(async (c, fake) => {
      for (const concurrency of [0, cases.concurrencyMax + 1, 1.5]) {
        await assert.rejects(c.consume('q', () => {}, { concurrency }),
          new RegExp(`concurrency must be an integer from 1 to ${cases.concurrencyMax}`));
      }
      assert.equal(fake.ops.filter((op) => op !== 'hello').length, 0);
    });
  });

  test('consume() without options stops on SIGINT and SIGTERM, as stopOnSignals says', async () => {
    assert.equal(cases.consumeDefaults.stopOnSignals, true);
    await withFake(async (c) => {
      const before = ['SIGINT', 'SIGTERM'].map((s) => process.listenerCount(s));
      const running = c.consume('q', () => {});
      await new Promise((r) => setTimeout(r, 50));
      assert.deepEqual(['SIGINT', 'SIGTERM'].map((s) => process.listenerCount(s)), before.map((n) => n + 1));
      process.emit('SIGTERM', 'SIGTERM');
      assert.deepEqual(await running, { completed: 0, failed: 0 });
      assert.deepEqual(['SIGINT', 'SIGTERM'].map((s) => process.listenerCount(s)), before, 'the previous handling is back');
    });
  });
});

describe('failureBackoffDelays', () => {
  for (const c of cases.failureBackoffDelays) {
    test(`failure ${c.failures} waits ${c.delayMs} ms`, () => {
      assert.equal(failureDelayMs(c.failures, CONSUME_DEFAULTS.failureBackoff), c.delayMs);
    });
  }
});

describe('pushRefusals', () => {
  for (const c of cases.pushRefusals) {
    test(`${JSON.stringify(c.item)}: ${c.error}, before anything is sent`, async () => {
      const queue = uniqueQueue('refusal');
      const refusal = (index) => (err) => {
        assert.ok(err instanceof InvalidArgumentError, err);
        assert.equal(err.code, 'invalid_argument');
        assert.equal(err.message, `push item ${index}: ${c.error}`);
        return true;
      };
      await assert.rejects(client.push(c.item), refusal(0));
      // The good item before it was not sent either: the whole push is refused.
      await assert.rejects(client.push([{ queue, payload: 'first' }, c.item]), refusal(1));
      await assert.rejects(client.transaction({ pushes: [{ queue, payload: 'first' }, c.item] }), refusal(1));
      await assert.rejects(client.stats(queue), NotFoundError, 'nothing was pushed');
    });
  }
});

describe('pushAccepted', () => {
  for (const c of cases.pushAccepted) {
    test(`${JSON.stringify(c.item)}: ${c.why}`, async () => {
      const queue = uniqueQueue('accepted');
      const [result] = await client.push({ ...c.item, queue });
      assert.equal(result.status, 'queued', JSON.stringify(result));
      const { messages } = await client.pop(queue, { autoAck: true });
      assert.deepEqual(messages.map((m) => m.payload), [c.item.payload]);
    });
  }
});

describe('unknownOptions', () => {
  // How each call of the file is made with the case's options.
  const CALLS = {
    pop: (c, options) => c.pop('q', options),
    consume: (c, options) => c.consume('q', () => {}, options),
    pushItem: (c, options) => c.push(options),
  };

  for (const c of cases.unknownOptions) {
    test(`${c.call} ${JSON.stringify(c.options)}: refused, naming ${c.names.join(', ')}`, async () => {
      assert.ok(Object.hasOwn(CALLS, c.call), `no way to make the call ${c.call}`);
      await withFake(async (fc, fake) => {
        await assert.rejects(CALLS[c.call](fc, c.options), (err) => {
          assert.ok(err instanceof TypeError, err);
          for (const name of c.names) assert.match(err.message, new RegExp(`\\b${name}\\b`));
          assert.match(err.message, /\(known: /);
          return true;
        });
        assert.deepEqual(fake.ops, [], 'nothing was sent');
      });
    });
  }

  test('every call refuses an unknown option, and sends nothing', async () => {
    const bad = { bogus: 1 };
    const calls = {
      hello: (c) => c.hello(bad),
      push: (c) => c.push({ queue: 'q', payload: 1 }, bad),
      pop: (c) => c.pop('q', bad),
      ack: (c) => c.ack({ leaseId: 'l', offset: 0 }, bad),
      ackItem: (c) => c.ack({ leaseId: 'l', ofset: 0 }),
      ackAndPop: (c) => c.ackAndPop([], 'q', bad),
      renew: (c) => c.renew(['l'], bad),
      release: (c) => c.release(['l'], bad),
      transaction: (c) => c.transaction({ acks: [], pushes: [] }, bad),
      transactionItems: (c) => c.transaction({ acks: [], pushs: [] }),
      configure: (c) => c.configure('q', { leaseSecond: 5 }),
      queues: (c) => c.queues(bad),
      stats: (c) => c.stats('q', bad),
      groups: (c) => c.groups('q', bad),
      seek: (c) => c.seek('q', 'g', 'end', bad),
      deleteGroup: (c) => c.deleteGroup('q', 'g', bad),
      dlq: (c) => c.dlq('q', bad),
      dlqReplay: (c) => c.dlqReplay([1], bad),
      dlqReplayBatch: (c) => c.dlqReplayBatch({ queue: 'q', grup: 'g' }),
      dlqReplayAll: (c) => c.dlqReplayAll({ queue: 'q' }, bad),
      dlqDelete: (c) => c.dlqDelete({ queue: 'q', eror: 'x' }),
      dlqDeleteAll: (c) => c.dlqDeleteAll({ queue: 'q', grup: 'g' }),
      dlqSummary: (c) => c.dlqSummary('q', bad),
      health: (c) => c.health(bad),
      call: (c) => c.call('health', {}, bad),
      consume: (c) => c.consume('q', () => {}, bad),
      consumeBackoff: (c) => c.consume('q', () => {}, { failureBackoff: { initial: 5 } }),
      messages: async (c) => c.messages('q', bad),
      connect: () => connect({ socket: '/nonexistent', bogus: 1 }),
      connectRetry: () => connect({ socket: '/nonexistent', retry: { maxDelay: 5 } }),
    };
    await withFake(async (c, fake) => {
      for (const [name, call] of Object.entries(calls)) {
        await assert.rejects(call(c), (err) => err instanceof TypeError && /unknown (option|key)/.test(err.message), name);
      }
      assert.deepEqual(fake.ops, [], 'nothing was sent');
    });
  });
});

describe('per-item ack codes', () => {
  test('each has its words, generated from protocol/ as the other clients\' are', () => {
    assert.equal(ACK_ITEM_CODES.already_acked, 'already acknowledged');
    assert.equal(ACK_ITEM_CODES.lease_expired, 'lease expired');
  });

  test('an AckError says what happened to each item in those words', () => {
    const err = new AckError([{ leaseId: 'l', offset: 4 }, { leaseId: 'l', offset: 5 }], {
      codes: ['already_acked', 'lease_expired'], indices: [0, 3],
    });
    assert.match(err.message, /^ack item 0: already acknowledged \(already_acked\); ack item 3: lease expired \(lease_expired\)/);
  });
});
