// Pushes numbered orders into a queue, one partition per customer, with
// transaction ids derived from the order number: run it twice and the
// second run is answered `duplicate`, item by item, instead of storing the
// orders again. The ids are those of examples/python/producer.py
// (transactionId('order', n) is transaction_id("order", n) in Python), so
// after one of the two, the other stores nothing new either.
//
//   node examples/node/producer.js [-n 100] [--queue orders] [--customers 4] [--socket PATH]
import { parseArgs } from 'node:util';
// In your own project: import { connect, transactionId } from 'queenside';
import { connect, transactionId } from '../../clients/node/src/index.js';

const { values: opts } = parseArgs({
  options: {
    socket: { type: 'string' }, // default: $QUEENSIDE_SOCKET, else ./.queenside/queenside.sock
    queue: { type: 'string', default: 'orders' },
    n: { type: 'string', short: 'n', default: '100' },
    customers: { type: 'string', default: '4' },
  },
});
const count = Number(opts.n);
const customers = Number(opts.customers);

const client = await connect({ socket: opts.socket, client: 'example-producer' });
try {
  const items = Array.from({ length: count }, (_, order) => ({
    queue: opts.queue,
    // One partition per customer keeps each customer's orders in order.
    partition: `customer-${order % customers}`,
    payload: { order, amount: 10 + (order % 7) },
    // The same order always gets the same id, so a retry is not a new order.
    transactionId: transactionId('order', order),
  }));
  const results = await client.push(items, { timeoutMs: 30_000 });
  const counts = {};
  for (const r of results) {
    counts[r.status] = (counts[r.status] ?? 0) + 1;
    if (r.status === 'failed') console.error(`order ${r.index} failed: ${r.error.code}: ${r.error.message}`);
  }
  console.log(`pushed ${results.length} orders to ${opts.queue}: ${JSON.stringify(counts)}`);
} finally {
  await client.close();
}
