// Bulk actions on dead letters (revision 1.2) against a real sidecar.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { connect, failed } from '../src/index.js';
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

/** Dead-letters n messages over partitions p0..p(parts-1), reason(i) each. */
async function fillDeadLetters(queue, n, parts, reason) {
  await client.configure(queue, { retryLimit: 0 });
  await client.pop(queue, { group: 'g' }); // subscribes g from the start
  await client.push(Array.from({ length: n }, (_, i) => ({ queue, partition: `p${i % parts}`, payload: { i } })));
  let dead = 0;
  while (dead < n) {
    const { messages } = await client.pop(queue, { group: 'g', batch: 10 * parts, partitions: parts });
    // a failure ends its lease: fail the first message of each
    const byLease = new Map();
    for (const m of messages) if (!byLease.has(m.leaseId)) byLease.set(m.leaseId, m);
    const items = [...byLease.values()].map((m, k) => failed(m, reason(dead + k)));
    const res = await client.ack(items);
    assert.ok(res.results.every((r) => r.deadLettered), JSON.stringify(res.results));
    dead += items.length;
  }
}

test('count, summary, replay all twice, delete by filter and by ids', async () => {
  const queue = uniqueQueue('bulk');
  await fillDeadLetters(queue, 24, 3, (i) => (i % 3 === 0 ? 'bad signature' : 'timeout'));

  const listed = await client.dlq(queue, { errorContains: 'timeout', count: true, limit: 1 });
  assert.equal(listed.count, 16);
  assert.equal(listed.replayedCount, 0);
  assert.equal(listed.entries[0].error, 'timeout');

  const summary = await client.dlqSummary(queue);
  assert.deepEqual(summary.map((s) => [s.group, s.error, s.count, s.replayed]), [['g', 'timeout', 16, 0], ['g', 'bad signature', 8, 0]]);
  assert.ok(summary[0].firstDeadAt <= summary[0].lastDeadAt);

  const batches = [];
  const first = await client.dlqReplayAll({ queue, errorContains: 'timeout' }, { onProgress: (b) => batches.push(b) });
  assert.deepEqual(first, { replayed: 16, skipped: 0, failed: 0 });
  assert.equal(batches.length, 1);
  assert.equal(batches[0].results.length, 16);
  const second = await client.dlqReplayAll({ queue, errorContains: 'timeout' });
  assert.deepEqual(second, { replayed: 0, skipped: 16, failed: 0 }, 'a second run replays nothing again');

  const one = await client.dlqReplayBatch({ queue, limit: 5 });
  assert.equal(one.results.length, 5);
  assert.equal(typeof one.nextAfterId, 'number');
  const stats = await client.stats(queue);
  assert.equal(stats.partitions.reduce((n, p) => n + p.messages, 0), 24 + 16 + one.replayed);

  const gone = await client.dlqDeleteAll({ queue, errorContains: 'signature' });
  assert.equal(gone, 8);
  const ids = (await client.dlq(queue, { limit: 2 })).entries.map((e) => e.id);
  assert.deepEqual(await client.dlqDelete({ ids }), { deleted: 2 });
  assert.equal((await client.dlq(queue, { count: true, limit: 1 })).count, 14);

  await assert.rejects(client.dlqDelete({ ids, queue }), { code: 'invalid_argument' });
  await assert.rejects(client.dlqSummary('no-such-queue'), { code: 'not_found' });
});
