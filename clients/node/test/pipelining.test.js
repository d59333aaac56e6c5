// Many calls in flight on one connection, answers matched by id, and calls
// given up on through an AbortSignal.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { completed, connect } from '../src/index.js';
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

describe('pipelining', () => {
  test('hundreds of concurrent calls on one connection each get their own answer', async () => {
    const queue = uniqueQueue('pipeline');
    const calls = Array.from({ length: 600 }, (_, i) =>
      client.push({ queue, partition: `p${i % 7}`, payload: i, transactionId: `t-${i}` }));
    calls.push(...Array.from({ length: 20 }, () => client.health()));
    assert.ok(client.inFlight > 100, 'the calls are in flight together');
    const results = await Promise.all(calls);
    for (let i = 0; i < 600; i++) {
      assert.equal(results[i][0].transactionId, `t-${i}`);
      assert.equal(results[i][0].partition, `p${i % 7}`);
      assert.equal(results[i][0].status, 'queued');
    }
    assert.ok(results.slice(600).every((h) => h.status === 'ok'));
    assert.equal(client.inFlight, 0);
    const stats = await client.stats(queue);
    assert.equal(stats.partitions.reduce((n, p) => n + p.messages, 0), 600);
  });

  test('answers that finish in another order than sent are matched by id', async () => {
    const queues = Array.from({ length: 30 }, () => uniqueQueue('match'));
    await Promise.all(queues.map((q, i) => client.push({ queue: q, payload: i })));
    // Long-polls on empty queues answer late; these pops answer at once.
    const slow = client.pop(uniqueQueue('empty'), { waitMs: 800 });
    const pops = await Promise.all(queues.map((q) => client.pop(q, { autoAck: true })));
    pops.forEach((p, i) => {
      assert.equal(p.messages[0].queue, queues[i]);
      assert.equal(p.messages[0].payload, i);
    });
    assert.deepEqual((await slow).messages, []);
  });

  test('a long-poll does not hold up the calls sent after it', async () => {
    const controller = new AbortController();
    const waiting = client.pop(uniqueQueue('idle'), { waitMs: 3000, signal: controller.signal });
    const started = Date.now();
    await Promise.all(Array.from({ length: 50 }, () => client.health()));
    assert.ok(Date.now() - started < 2000, `health calls took ${Date.now() - started} ms`);
    controller.abort();
    await assert.rejects(waiting, { name: 'AbortError' });
  });
});

describe('AbortSignal', () => {
  test('an already aborted signal rejects without sending', async () => {
    const controller = new AbortController();
    controller.abort(new Error('never mind'));
    await assert.rejects(client.health({ signal: controller.signal }), /never mind/);
    assert.equal(client.inFlight, 0);
  });

  test('aborting a call in flight rejects it; its late answer is discarded', async () => {
    const queue = uniqueQueue('abort');
    const controller = new AbortController();
    const waiting = client.pop(queue, { waitMs: 1000, signal: controller.signal });
    setTimeout(() => controller.abort(), 50);
    await assert.rejects(waiting, { name: 'AbortError' });
    assert.equal(client.inFlight, 0);
    // The sidecar still answers the pop after its wait; the connection must
    // take that in its stride.
    await new Promise((r) => setTimeout(r, 1100));
    assert.equal((await client.health()).status, 'ok');
    assert.equal(client.closed, false);
  });

  test('AbortSignal.timeout works as a client-side deadline', async () => {
    const waiting = client.pop(uniqueQueue('timeout'), { waitMs: 5000, signal: AbortSignal.timeout(100) });
    await assert.rejects(waiting, { name: 'TimeoutError' });
  });

  test('leases granted to an aborted pop are given back at once', async () => {
    const queue = uniqueQueue('late-lease');
    const controller = new AbortController();
    const waiting = client.pop(queue, { group: 'g', waitMs: 5000, signal: controller.signal });
    await new Promise((r) => setTimeout(r, 100));
    controller.abort();
    await assert.rejects(waiting, { name: 'AbortError' });
    // The pop still waits on the sidecar: this push wakes it, it leases the
    // message for 60 s and answers a caller that is gone.
    await client.push({ queue, payload: 'wanted' });
    const other = await connect({ socket: sidecars.socket });
    try {
      const started = Date.now();
      const { messages } = await other.pop(queue, { group: 'g', waitMs: 5000 });
      assert.equal(messages[0]?.payload, 'wanted', 'the abandoned lease was released');
      assert.ok(Date.now() - started < 4000);
      await other.ack(messages.map(completed));
    } finally {
      await other.close();
    }
  });

  test('timeoutMs on a long-poll ends it with an empty answer before the deadline', async () => {
    const started = Date.now();
    const { messages } = await client.pop(uniqueQueue('deadline'), { waitMs: 5000, timeoutMs: 300 });
    assert.deepEqual(messages, []);
    assert.ok(Date.now() - started < 1000);
  });
});
