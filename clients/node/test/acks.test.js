// ack takes popped messages as they are, and the helpers that make ack
// items (clients/README.md), against a real sidecar.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { completed, connect, failed } from '../src/index.js';
import { wireAckItem } from '../src/items.js';
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

async function pushed(queue, n) {
  const items = Array.from({ length: n }, (_, i) => ({ queue, payload: i, transactionId: `m${i}` }));
  const results = await client.push(items);
  assert.ok(results.every((r) => r.status === 'queued'), JSON.stringify(results));
}

describe('ack takes what pop returned', () => {
  test('ack(res.messages) completes them all', async () => {
    const queue = uniqueQueue('ack-messages');
    await pushed(queue, 3);
    const res = await client.pop(queue, { batch: 3 });
    assert.equal(res.messages.length, 3);
    const acked = await client.ack(res.messages);
    assert.deepEqual(acked.results.map((r) => r.success), [true, true, true]);
    assert.equal(acked.leases[0].released, true);
    assert.equal(acked.leases[0].cursor, 3);
  });

  test('one message as it is, with the item failing another', async () => {
    const queue = uniqueQueue('ack-mixed');
    await pushed(queue, 2);
    const [first, second] = (await client.pop(queue, { batch: 2 })).messages;
    const acked = await client.ack([first, second.failed(new Error('bad input'))]);
    assert.deepEqual(acked.results.map((r) => r.success), [true, true]);
    const again = (await client.pop(queue, { batch: 2 })).messages;
    assert.deepEqual(again.map((m) => [m.offset, m.redelivered]), [[1, true]]); // the failure rewound to it
  });

  test('transaction takes messages too', async () => {
    const queue = uniqueQueue('tx-messages');
    await pushed(queue, 1);
    const [message] = (await client.pop(queue)).messages;
    const res = await client.transaction({ acks: [message], pushes: [{ queue: `${queue}-out`, payload: 1, transactionId: 'f1' }] });
    assert.equal(res.acks[0].success, true);
    assert.equal(res.pushes[0].status, 'queued');
  });

  test('a popped message keeps printing and serialising as plain data', async () => {
    const queue = uniqueQueue('plain');
    await pushed(queue, 1);
    const [message] = (await client.pop(queue)).messages;
    assert.equal(typeof message.completed, 'function');
    assert.ok(!Object.keys(message).includes('completed') && !Object.keys(message).includes('failed'));
    assert.equal(JSON.parse(JSON.stringify({ ...message, payloadBytes: undefined })).offset, 0);
    // A copy that lost its methods (structuredClone, a worker) is still acked.
    const acked = await client.ack([structuredClone({ ...message })]);
    assert.equal(acked.results[0].success, true);
  });
});

describe('a second ack of a message already acknowledged', () => {
  // Needs a sidecar of revision 1.2 with already_acked; an older one
  // answers lease_expired, and this test fails.
  test('is answered already_acked, and changes nothing', async () => {
    const queue = uniqueQueue('ack-twice');
    await pushed(queue, 2);
    const { messages } = await client.pop(queue, { batch: 2 });
    const first = await client.ack(messages);
    assert.deepEqual(first.results.map((r) => r.success), [true, true]);
    const second = await client.ack(messages[0]);
    assert.deepEqual(second.results, [{ index: 0, success: false, code: 'already_acked' }]);
    const [stats] = (await client.stats(queue)).partitions;
    assert.equal(stats.groups[0].cursor, 2, 'the cursor stays where the first ack put it');
  });
});

describe('the helpers', () => {
  const message = { queue: 'q', partition: 'Default', offset: 7, messageId: 'm7', transactionId: 't7', leaseId: 'lease-1' };
  const want = { leaseId: 'lease-1', offset: 7, status: 'completed' };

  test('build {leaseId, offset, status[, error]}, never the transactionId too', () => {
    assert.deepEqual(completed(message), want);
    assert.deepEqual(wireAckItem(message), want);
    assert.deepEqual(failed(message, new Error('no\0good')), { leaseId: 'lease-1', offset: 7, status: 'failed', error: 'no\uFFFDgood' });
    assert.deepEqual(failed(message), { leaseId: 'lease-1', offset: 7, status: 'failed' });
    const item = { leaseId: 'l', transactionId: 't', status: 'failed' };
    assert.equal(wireAckItem(item), item); // an ack item goes as it is
  });

  test('a message without a lease (autoAck) is refused here', async () => {
    const queue = uniqueQueue('auto');
    await pushed(queue, 1);
    const [message] = (await client.pop(queue, { autoAck: true })).messages;
    assert.throws(() => message.completed(), /leaseId/);
    await assert.rejects(client.ack([message]), /leaseId/);
  });
});
