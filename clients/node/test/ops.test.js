// Every operation against a real sidecar and PostgreSQL.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import {
  ConflictError, DEFAULT_QUEUE_OPTIONS, NotFoundError, PreciseDate, completed, connect, encode, failed,
} from '../src/index.js';
import { testSidecars, uniqueQueue } from './harness.js';

let sidecars;
let client;
before(async () => {
  sidecars = await testSidecars();
  client = await connect({ socket: sidecars.socket, client: 'node-tests' });
});
after(async () => {
  await client?.close();
  await sidecars?.stop();
});

async function pushAll(queue, payloads, extra = {}) {
  const results = await client.push(payloads.map((payload) => ({ queue, payload, ...extra })));
  assert.ok(results.every((r) => r.status === 'queued'), JSON.stringify(results));
  return results;
}

describe('hello and health', () => {
  test('connect says hello and learns the frame limit', () => {
    assert.equal(client.server.protocol, 1);
    assert.equal(client.server.server, 'queenside');
    assert.equal(typeof client.server.sidecarId, 'string');
    assert.equal(client.maxFrameBytes, client.server.maxFrameBytes);
    assert.ok(client.maxFrameBytes >= 1024);
  });

  test('health reports a live database', async () => {
    const h = await client.health();
    assert.equal(h.status, 'ok');
    assert.equal(h.database.ok, true);
    assert.equal(typeof h.uptimeSeconds, 'number');
    assert.equal(typeof h.spool.records, 'number');
  });
});

describe('push', () => {
  test('an item is queued, its repeat is a duplicate of it', async () => {
    const queue = uniqueQueue('push');
    const item = { queue, partition: 'p1', payload: { n: 1 }, transactionId: 'order-1' };
    const [first] = await client.push(item);
    assert.equal(first.status, 'queued');
    assert.equal(first.offset, 0);
    assert.equal(first.partition, 'p1');
    assert.ok(first.committedAt instanceof PreciseDate);
    const [again] = await client.push([item]);
    assert.equal(again.status, 'duplicate');
    assert.equal(again.messageId, first.messageId);
    assert.equal(again.offset, 0);
  });

  test('without a transactionId the sidecar makes one up', async () => {
    const [r] = await client.push({ queue: uniqueQueue('push'), payload: null });
    assert.equal(r.status, 'queued');
    assert.ok(r.transactionId.length > 0);
  });

  test('payloads of any msgpack value come back decoded, with their exact bytes', async () => {
    const queue = uniqueQueue('payloads');
    const payloads = [
      { nested: { list: [1, 'two', 3.5, null, true] } },
      null,
      'text',
      2n ** 60n,
      Uint8Array.of(0, 1, 255),
      new Date('2026-01-02T03:04:05.678Z'),
      -7,
    ];
    await pushAll(queue, payloads, { traceId: 'trace-1', headers: { source: 'test' } });
    const { messages } = await client.pop(queue, { batch: 10, autoAck: true });
    assert.equal(messages.length, payloads.length);
    messages.forEach((m, i) => {
      assert.deepEqual(Buffer.from(m.payloadBytes), Buffer.from(encode(payloads[i])), `payload ${i} bytes`);
      if (payloads[i] instanceof Date) assert.equal(m.payload.getTime(), payloads[i].getTime());
      else if (payloads[i] instanceof Uint8Array) assert.deepEqual([...m.payload], [...payloads[i]]);
      else assert.deepEqual(m.payload, payloads[i]);
      assert.equal(m.traceId, 'trace-1');
      assert.deepEqual(m.headers, { source: 'test' });
      assert.equal(m.leaseId, undefined, 'autoAck gives no lease');
    });
  });

  test('payloadBytes forwards a payload byte for byte', async () => {
    const queue = uniqueQueue('forward');
    const bytes = encode({ forwarded: [1, 2, 3] });
    await client.push({ queue, payloadBytes: bytes });
    const { messages } = await client.pop(queue, { autoAck: true });
    assert.deepEqual(Buffer.from(messages[0].payloadBytes), Buffer.from(bytes));
    await assert.rejects(client.push({ queue, payloadBytes: Uint8Array.of(0x92, 0x01) }), TypeError);
    await assert.rejects(client.push({ queue, payload: 1, payloadBytes: bytes }), TypeError);
  });

  test('a payload without a JS value costs only its own decoded form', async () => {
    const queue = uniqueQueue('odd-payload');
    const binaryKeyMap = Uint8Array.of(0x81, 0xc4, 0x01, 0x00, 0x01); // {bin(00): 1}
    const oddTimestamp = Uint8Array.of(0xc7, 0x05, 0xff, 1, 2, 3, 4, 5); // ext -1 of 5 bytes
    await client.push([{ queue, payloadBytes: binaryKeyMap }, { queue, payloadBytes: oddTimestamp }, { queue, payload: 'ok' }]);
    const { messages } = await client.pop(queue, { batch: 3, autoAck: true });
    assert.equal(messages.length, 3);
    assert.equal(messages[0].payload, undefined);
    assert.deepEqual([...messages[0].payloadBytes], [...binaryKeyMap]);
    assert.equal(messages[1].payload.type, -1, 'kept as an extension');
    assert.deepEqual([...encode(messages[1].payload)], [...oddTimestamp]);
    assert.equal(messages[2].payload, 'ok');
  });
});

describe('pop and ack', () => {
  test('completing every message of a lease moves the cursor and ends the lease', async () => {
    const queue = uniqueQueue('ack');
    await pushAll(queue, [0, 1, 2]);
    const { messages, leases } = await client.pop(queue, { group: 'g', batch: 10 });
    assert.deepEqual(messages.map((m) => m.payload), [0, 1, 2]);
    assert.equal(leases.length, 1);
    assert.equal(leases[0].fromOffset, 0);
    assert.equal(leases[0].toOffset, 2);
    assert.equal(leases[0].headAttempts, 1);
    const ack = await client.ack(messages.map(completed));
    assert.ok(ack.results.every((r) => r.success));
    assert.deepEqual(ack.leases, [{ leaseId: leases[0].leaseId, released: true, cursor: 3 }]);
    const empty = await client.pop(queue, { group: 'g' });
    assert.equal(empty.messages.length, 0);
  });

  test('a failure rewinds: the failed message and those after it come again', async () => {
    const queue = uniqueQueue('nack');
    await pushAll(queue, ['a', 'b', 'c']);
    const first = await client.pop(queue, { group: 'g', batch: 3 });
    const [a, b, c] = first.messages;
    const ack = await client.ack([completed(a), failed(b, new Error('no stock')), completed(c)]);
    assert.deepEqual(ack.results.map((r) => [r.success, r.code]), [[true, undefined], [true, undefined], [false, 'rewound']]);
    assert.equal(ack.leases[0].released, true);
    assert.equal(ack.leases[0].cursor, 1);
    const again = await client.pop(queue, { group: 'g', batch: 3 });
    assert.deepEqual(again.messages.map((m) => m.payload), ['b', 'c']);
    assert.ok(again.messages.every((m) => m.redelivered));
    assert.equal(again.leases[0].headAttempts, 2);
    await client.ack(again.messages.map(completed));
  });

  test('a long-poll pop is woken by a push', async () => {
    const queue = uniqueQueue('longpoll');
    const started = Date.now();
    const waiting = client.pop(queue, { waitMs: 10_000, autoAck: true });
    await new Promise((r) => setTimeout(r, 100));
    await client.push({ queue, payload: 'wake' });
    const { messages } = await waiting;
    assert.equal(messages[0].payload, 'wake');
    assert.ok(Date.now() - started < 5000, 'woken by the push, not by the end of the wait');
  });
});

describe('renew and release', () => {
  test('renew extends a live lease; an ended one answers lease_expired', async () => {
    const queue = uniqueQueue('renew');
    await pushAll(queue, [1]);
    const { leases } = await client.pop(queue, { leaseSeconds: 5 });
    const [renewed] = await client.renew(leases[0].leaseId, { seconds: 120 });
    assert.equal(renewed.success, true);
    assert.ok(renewed.expiresAt.getTime() > leases[0].expiresAt.getTime() + 60_000);
    const [released] = await client.release([leases[0].leaseId]);
    assert.equal(released.success, true);
    const [late] = await client.renew([leases[0].leaseId]);
    assert.deepEqual([late.success, late.code], [false, 'lease_expired']);
  });

  test('release hands the messages back at once, charging nothing', async () => {
    const queue = uniqueQueue('release');
    await pushAll(queue, [1, 2]);
    const first = await client.pop(queue, { batch: 2 });
    const [r] = await client.release(first.leases[0].leaseId);
    assert.equal(r.success, true);
    const second = await client.pop(queue, { batch: 2 });
    assert.deepEqual(second.messages.map((m) => m.payload), [1, 2]);
    const [again] = await client.release(first.leases[0].leaseId);
    assert.deepEqual([again.success, again.code], [false, 'lease_expired']);
    await client.ack(second.messages.map(completed));
  });
});

describe('transaction', () => {
  test('acks and pushes commit together', async () => {
    const input = uniqueQueue('tx-in');
    const output = uniqueQueue('tx-out');
    await pushAll(input, ['job']);
    const { messages } = await client.pop(input, { group: 'g' });
    const result = await client.transaction({
      acks: [completed(messages[0])],
      pushes: [{ queue: output, payload: 'result', transactionId: 'result-1' }],
    });
    assert.equal(result.acks[0].success, true);
    assert.equal(result.pushes[0].status, 'queued');
    const stats = await client.stats(input);
    assert.equal(stats.partitions[0].groups[0].cursor, 1);
    assert.equal((await client.stats(output)).partitions[0].messages, 1);
  });

  test('an ack that cannot succeed fails the whole transaction with conflict', async () => {
    const input = uniqueQueue('tx-conflict');
    const output = uniqueQueue('tx-never');
    await pushAll(input, ['job']);
    const { messages, leases } = await client.pop(input, { group: 'g' });
    await client.release(leases[0].leaseId);
    const err = await client.transaction({
      acks: [completed(messages[0])],
      pushes: [{ queue: output, payload: 'result' }],
    }).then(() => assert.fail('committed'), (e) => e);
    assert.ok(err instanceof ConflictError, err);
    assert.equal(err.code, 'conflict');
    assert.equal(err.retryable, false);
    assert.equal(err.acks[0].success, false);
    assert.equal(err.acks[0].code, 'lease_expired');
    // The queue and partition may exist (they are made before the
    // transaction), but hold nothing.
    const stats = await client.stats(output).catch((e) => (e instanceof NotFoundError ? { partitions: [] } : Promise.reject(e)));
    assert.ok(stats.partitions.every((p) => p.messages === 0), 'nothing was pushed');
  });
});

describe('queues', () => {
  test('configure replaces the options; queues and stats report them', async () => {
    const queue = uniqueQueue('conf');
    const { options } = await client.configure(queue, { leaseSeconds: 30, retryLimit: 5 });
    assert.equal(options.leaseSeconds, 30);
    assert.equal(options.retryLimit, 5);
    assert.equal(options.dedupWindowSeconds, 3600, 'options left out take their defaults');
    const listed = (await client.queues()).find((q) => q.queue === queue);
    assert.deepEqual(listed.options, options);
    await pushAll(queue, [1, 2], { partition: 'b' });
    await pushAll(queue, [3], { partition: 'a' });
    const stats = await client.stats(queue);
    assert.deepEqual(stats.partitions.map((p) => [p.partition, p.headOffset, p.messages]), [['a', 1, 1], ['b', 2, 2]]);
  });
});

describe('queue options', () => {
  test('configure round-trips every option, maxDeliveries included', async () => {
    const queue = uniqueQueue('options');
    const options = { ...DEFAULT_QUEUE_OPTIONS, maxDeliveries: 3, consumptionPaused: true, retryLimit: 5 };
    const res = await client.configure(queue, options);
    assert.deepEqual({ ...res.options }, options);
    const listed = (await client.queues()).find((q) => q.queue === queue);
    assert.equal(listed.options.maxDeliveries, 3);
    // configure replaces every option: one left out is its default again.
    // Options the sidecar leaves out (off) come back as their defaults.
    const reset = await client.configure(queue, {});
    assert.deepEqual({ ...reset.options }, { ...DEFAULT_QUEUE_OPTIONS });
  });
});

describe('dead letters', () => {
  test('a message out of retries is dead-lettered, listed, and replayed', async () => {
    const queue = uniqueQueue('dlq');
    await client.configure(queue, { retryLimit: 0 });
    await pushAll(queue, [{ order: 9 }]);
    const { messages } = await client.pop(queue, { group: 'g' });
    const ack = await client.ack(failed(messages[0], 'payment refused'));
    assert.equal(ack.results[0].deadLettered, true);

    const page = await client.dlq(queue, { group: 'g' });
    assert.equal(page.entries.length, 1);
    const entry = page.entries[0];
    assert.deepEqual(entry.payload, { order: 9 });
    assert.deepEqual(Buffer.from(entry.payloadBytes), Buffer.from(encode({ order: 9 })));
    assert.equal(entry.error, 'payment refused');
    assert.equal(entry.failures, 1);
    assert.equal(entry.group, 'g');
    assert.ok(entry.deadAt instanceof Date);
    assert.equal(page.nextAfterId, undefined);

    const [replayed] = await client.dlqReplay(entry.id);
    assert.equal(replayed.status, 'queued');
    assert.equal(replayed.offset, 1);
    const again = await client.pop(queue, { group: 'g' });
    assert.deepEqual(again.messages[0].payload, { order: 9 });
    assert.equal(again.messages[0].transactionId, replayed.transactionId);
    const [after] = (await client.dlq(queue)).entries;
    assert.ok(after.replayedAt instanceof Date);
    const [missing] = await client.dlqReplay([987654321]);
    assert.equal(missing.status, 'failed');
    assert.equal(missing.error.code, 'not_found');
  });
});

describe('groups and cursors', () => {
  test('seek moves a group to the beginning, the end, or a time', async () => {
    const queue = uniqueQueue('seek');
    const pushed = [];
    for (const n of [0, 1, 2]) {
      pushed.push(...(await pushAll(queue, [n])));
      await new Promise((r) => setTimeout(r, 5)); // distinct commit times
    }
    const { messages } = await client.pop(queue, { group: 'g', batch: 3 });
    await client.ack(messages.map(completed));

    assert.deepEqual(await client.seek(queue, 'g', 'beginning'), [{ partition: 'Default', cursor: 0 }]);
    const { messages: replay } = await client.pop(queue, { group: 'g', autoAck: true });
    assert.equal(replay[0].payload, 0);
    assert.equal(replay[0].redelivered, false, 'a seek forgets earlier deliveries');

    assert.deepEqual(await client.seek(queue, 'g', 'end'), [{ partition: 'Default', cursor: 3 }]);
    assert.deepEqual(await client.seek(queue, 'g', pushed[1].committedAt, { partition: 'Default' }),
      [{ partition: 'Default', cursor: 1 }]);
  });

  test('groups lists lag; deleteGroup removes a group', async () => {
    const queue = uniqueQueue('groups');
    await pushAll(queue, [1, 2, 3]);
    await client.pop(queue, { group: 'reporting', autoAck: true });
    const groups = await client.groups(queue);
    assert.deepEqual(groups.map((g) => [g.group, g.lag, g.leasedPartitions]), [['reporting', 2, 0]]);
    assert.ok(groups[0].oldestUnackedAt instanceof Date);
    const all = await client.groups();
    assert.ok(all.some((g) => g.queue === queue && g.group === 'reporting'));
    assert.equal(await client.deleteGroup(queue, 'reporting'), true);
    assert.equal(await client.deleteGroup(queue, 'reporting'), false);
    assert.deepEqual(await client.groups(queue), []);
  });
});
