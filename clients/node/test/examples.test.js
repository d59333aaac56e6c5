// The programs in examples/node, run end to end as a person would run them
// (short runs), against the test sidecar.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { after, before, test } from 'node:test';
import { promisify } from 'node:util';
import { connect } from '../src/index.js';
import { REPO_ROOT, testSidecars, uniqueQueue } from './harness.js';

const run = promisify(execFile);

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

function example(name, args) {
  return run(process.execPath, [`examples/node/${name}.js`, '--socket', sidecars.socket, ...args], {
    cwd: REPO_ROOT,
    timeout: 30_000,
  });
}

async function allMessages(queue) {
  const { messages } = await client.pop(queue, { group: 'checker', batch: 1000, partitions: 100, autoAck: true });
  return messages;
}

test('producer and worker: every order invoiced once, even when orders come again', async () => {
  const orders = uniqueQueue('orders');
  const invoices = uniqueQueue('invoices');
  const count = 30;

  const first = await example('producer', ['--queue', orders, '-n', String(count), '--customers', '3']);
  assert.match(first.stdout, /pushed 30 orders .*"queued":30/);
  const second = await example('producer', ['--queue', orders, '-n', String(count), '--customers', '3']);
  assert.match(second.stdout, /"duplicate":30/, 'a second run stores nothing new');

  const worker = ['--queue', orders, '--results', invoices, '--group', 'billing', '--idle-exit', '2'];
  const work = await example('worker', worker);
  assert.match(work.stdout, /stopped: 30 orders acked, 30 invoiced, 0 already invoiced before/);

  const got = await allMessages(invoices);
  assert.equal(got.length, count);
  const byOrder = new Map(got.map((m) => [m.payload.order, m.payload]));
  assert.deepEqual([...byOrder.keys()].sort((a, b) => a - b), Array.from({ length: count }, (_, i) => i));
  for (const [order, invoice] of byOrder) {
    assert.equal(invoice.amount, 10 + (order % 7));
    assert.ok(Math.abs(invoice.total - invoice.amount * 1.2) < 1e-9);
  }
  assert.ok(got.every((m) => m.partition === `customer-${m.payload.order % 3}`), 'invoices keep the customer partition');

  // Every order delivered again: the invoices are recognised as done.
  await client.seek(orders, 'billing', 'beginning');
  const again = await example('worker', worker);
  assert.match(again.stdout, /stopped: 30 orders acked, 0 invoiced, 30 already invoiced before/);
  const stats = await client.stats(invoices);
  assert.equal(stats.partitions.reduce((n, p) => n + p.messages, 0), count, 'still one invoice per order');
});
