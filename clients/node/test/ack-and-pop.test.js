// ackAndPop: acks and the next pop in one request (revision 1.2), against
// a real sidecar, and against a fake one of revision 1.1 that ignores the
// pop; and the codec keeping the carried pop's payloads as their bytes.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import {
  OverloadedError, QueensideError, RawMsgpack, connect, decodeEnvelope, encode, encodeEnvelope,
} from '../src/index.js';
import { errorFrame, fakeSidecar, resultFrame } from './fake-sidecar.js';
import { SMALL_FRAME_BYTES, testSidecars, uniqueQueue } from './harness.js';

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

async function pushAll(c, queue, payloads) {
  const results = await c.push(payloads.map((payload, i) => ({ queue, partition: 'p', payload, transactionId: `t-${i}` })));
  assert.ok(results.every((r) => r.status === 'queued'));
}

describe('ackAndPop against a real sidecar', () => {
  test('it returns the ack results and the next messages', async () => {
    const queue = uniqueQueue('ackpop');
    await pushAll(client, queue, ['a', 'b', 'c', 'd']);
    const first = await client.pop(queue, { group: 'g', batch: 2 });
    // Stamped by PostgreSQL: the role the sidecar logs in as.
    assert.ok(first.messages.every((m) => typeof m.producer === 'string' && m.producer !== ''), 'a producer on each message');
    const res = await client.ackAndPop(first.messages, queue, { group: 'g', batch: 2 });
    assert.deepEqual(res.results.map((r) => r.success), [true, true]);
    assert.deepEqual(res.leases.map((l) => [l.leaseId, l.released, Number(l.cursor)]), [[first.leases[0].leaseId, true, 2]]);
    assert.equal(res.popError, undefined);
    // The pop came after the acks, in their transaction: it gets the rest.
    assert.deepEqual(res.pop.messages.map((m) => [Number(m.offset), m.payload]), [[2, 'c'], [3, 'd']]);
    assert.deepEqual([...res.pop.messages[0].payloadBytes], [...encode('c')], 'the exact bytes beside the value');
    assert.equal(res.pop.leases.length, 1);

    // Items as ack takes them: a message (completed) beside a failed item.
    const [c, d] = res.pop.messages;
    const again = await client.ackAndPop([c, d.failed(new Error('bad input'))], queue, { group: 'g', batch: 2 });
    assert.deepEqual(again.results.map((r) => r.success), [true, true]);
    assert.deepEqual(again.pop.messages.map((m) => [Number(m.offset), m.redelivered]), [[3, true]]);
    await client.ack(again.pop.messages);
    const [group] = await client.groups(queue);
    assert.equal(group.lag, 0);
  });

  test('a long-poll waits once the acks are committed', async () => {
    const queue = uniqueQueue('ackpop-wait');
    await pushAll(client, queue, ['only']);
    const { messages } = await client.pop(queue, { group: 'g' });
    const started = Date.now();
    const res = await client.ackAndPop(messages, queue, { group: 'g', waitMs: 300 });
    assert.ok(Date.now() - started >= 250, 'the pop waited');
    assert.ok(res.results.every((r) => r.success));
    assert.deepEqual([res.pop.messages, res.pop.leases], [[], []]);
  });

  test('leases granted to an aborted ackAndPop are given back at once', async () => {
    const queue = uniqueQueue('ackpop-late');
    await pushAll(client, queue, ['first']);
    const { messages } = await client.pop(queue, { group: 'g' });
    const controller = new AbortController();
    const waiting = client.ackAndPop(messages, queue, { group: 'g', waitMs: 5000, signal: controller.signal });
    await new Promise((r) => setTimeout(r, 100));
    controller.abort();
    await assert.rejects(waiting, { name: 'AbortError' });
    // The acks were committed before the wait; this push wakes the pop,
    // which leases the message and answers a caller that is gone.
    await client.push({ queue, partition: 'p', payload: 'wanted' });
    const other = await connect({ socket: sidecars.socket });
    try {
      const started = Date.now();
      const next = await other.pop(queue, { group: 'g', waitMs: 5000 });
      assert.deepEqual(next.messages.map((m) => [Number(m.offset), m.payload]), [[1, 'wanted']], 'acked, and the lease released');
      assert.ok(Date.now() - started < 4000);
      await other.ack(next.messages);
    } finally {
      await other.close();
    }
  });

  test('a pop that fails after the acks is popError, an error of its class', async (t) => {
    if (!sidecars.smallSocket) return t.skip('no second sidecar (the dev database URL was not found)');
    // The two sidecars share the database: a message leased through the
    // first is acked through the second, whose frames of SMALL_FRAME_BYTES
    // are too small for any pop's answer to carry a message.
    const small = await connect({ socket: sidecars.smallSocket });
    try {
      assert.equal(small.maxFrameBytes, SMALL_FRAME_BYTES);
      const queue = uniqueQueue('ackpop-overload');
      await pushAll(client, queue, ['first', 'second']);
      const { messages } = await client.pop(queue, { group: 'g' });
      const res = await small.ackAndPop(messages, queue, { group: 'g' });
      assert.ok(res.results.every((r) => r.success), 'the acks were applied');
      assert.equal(Number(res.leases[0].cursor), 1);
      assert.ok(res.popError instanceof OverloadedError);
      assert.equal(res.popError.code, 'overloaded');
      assert.equal(res.popError.retryable, true);
      assert.deepEqual([res.pop.messages, res.pop.leases], [[], []]);
    } finally {
      await small.close();
    }
  });
});

// A sidecar of revision 1.1: it ignores ack's pop.
const NOW = new Date('2027-01-15T10:00:00Z');
const LEASE = { leaseId: 'L1', queue: 'q', partition: 'p', group: 'g', fromOffset: 5, toOffset: 5, expiresAt: NOW, headAttempts: 1 };
const MESSAGE = {
  queue: 'q', partition: 'p', offset: 5, messageId: 'm5', transactionId: 't5', payload: 7, committedAt: NOW, leaseId: 'L1', redelivered: false,
};
const ACKED = { results: [{ index: 0, success: true }], leases: [{ leaseId: 'L0', released: true, cursor: 5 }] };
const ITEM = { leaseId: 'L0', offset: 4, status: 'completed' };

function revision11(popAnswer) {
  return (_n, request) => [request.op === 'ack' ? resultFrame(request, ACKED) : popAnswer(request)];
}

async function withFake(script, body) {
  const fake = await fakeSidecar(script);
  const c = await connect({ socket: fake.socket, hello: false, retry: false });
  try {
    return await body(c, fake);
  } finally {
    await c.close();
    await fake.close();
  }
}

describe('ackAndPop against a sidecar of revision 1.1', () => {
  test('without pop in the answer it pops on its own', async () => {
    await withFake(revision11((req) => resultFrame(req, { messages: [MESSAGE], leases: [LEASE] })), async (c, fake) => {
      const res = await c.ackAndPop([ITEM], 'q', { group: 'g', batch: 5, waitMs: 100 });
      assert.deepEqual(fake.ops, ['ack', 'pop']);
      const carried = fake.requests[0].args.pop;
      assert.deepEqual(carried, { queue: 'q', group: 'g', batch: 5, waitMs: 100 });
      assert.deepEqual(fake.requests[1].args, carried, 'the same pop, sent on its own');
      assert.ok(res.results[0].success);
      assert.equal(res.popError, undefined);
      const [m] = res.pop.messages;
      assert.deepEqual([m.offset, m.payload, m.leaseId], [5, 7, 'L1']);
      assert.deepEqual(m.completed(), { leaseId: 'L1', offset: 5, status: 'completed' });
    });
  });

  test('a failed pop of its own is popError, beside the acks', async () => {
    await withFake(revision11((req) => errorFrame(req, 'overloaded')), async (c, fake) => {
      const res = await c.ackAndPop(ITEM, 'q');
      assert.deepEqual(fake.ops, ['ack', 'pop']);
      assert.ok(res.results[0].success);
      assert.ok(res.popError instanceof OverloadedError);
      assert.deepEqual(res.pop.messages, []);
    });
  });

  test('an answer with pop or popError sends no second pop', async () => {
    const answers = [
      { pop: { messages: [], leases: [] } },
      { pop: { messages: [], leases: [] }, popError: { code: 'not_found', message: 'gone', retryable: false } },
    ];
    for (const answer of answers) {
      await withFake((_n, req) => [resultFrame(req, { ...ACKED, ...answer })], async (c, fake) => {
        const res = await c.ackAndPop([ITEM], 'q');
        assert.deepEqual(fake.ops, ['ack']);
        assert.equal(res.popError instanceof QueensideError, 'popError' in answer);
        if (res.popError) assert.equal(res.popError.code, 'not_found');
      });
    }
  });
});

test('the codec keeps the payloads of the pop an ack carried as their bytes', () => {
  const frame = encodeEnvelope({ id: 9, result: { ...ACKED, pop: { messages: [{ ...MESSAGE, payload: { a: [1, 2] } }], leases: [LEASE] } } });
  const envelope = decodeEnvelope(frame.subarray(4));
  const { payload } = envelope.result.pop.messages[0];
  assert.ok(payload instanceof RawMsgpack);
  assert.deepEqual([...payload.bytes], [...encode({ a: [1, 2] })]);
  assert.deepEqual(encodeEnvelope(envelope), frame, 'encoded again to the same bytes');
});
