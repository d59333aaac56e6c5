// Consumes orders as one consumer group and pushes an invoice for each to
// another queue. The work is idempotent, keyed by the order's transaction
// id: the invoice's transaction id is derived from it, so when an order is
// delivered again (a crash before the ack, an expired lease, a replay) the
// invoice push is answered `duplicate` and no second invoice appears.
//
//   node examples/node/worker.js [--queue orders] [--results invoices] [--group billing]
//                                [--idle-exit SECONDS] [--socket PATH]
//
// Ctrl-C (or SIGTERM) stops it cleanly, as consume() does by default: the
// order in hand is finished and acked, the rest of its leases is released
// for other workers. An order whose handler throws is logged and comes
// again after a growing delay.
import { parseArgs } from 'node:util';
// In your own project: import { connect, transactionId } from 'queenside';
import { connect, transactionId } from '../../clients/node/src/index.js';

const { values: opts } = parseArgs({
  options: {
    socket: { type: 'string' }, // default: $QUEENSIDE_SOCKET, else ./.queenside/queenside.sock
    queue: { type: 'string', default: 'orders' },
    results: { type: 'string', default: 'invoices' },
    group: { type: 'string', default: 'billing' },
    // Stop after this long without an order (for scripted runs); 0: never.
    'idle-exit': { type: 'string', default: '0' },
  },
});

const TAX_RATE = 0.2;

const client = await connect({ socket: opts.socket, client: 'example-worker' });
const stop = new AbortController();
const idleMs = Number(opts['idle-exit']) * 1000;
let idleTimer;
const stillBusy = () => {
  if (idleMs <= 0) return;
  clearTimeout(idleTimer);
  idleTimer = setTimeout(() => stop.abort(), idleMs);
};
stillBusy();

let invoiced = 0;
let alreadyDone = 0;
try {
  const totals = await client.consume(opts.queue, async (order) => {
    stillBusy();
    const { order: number, amount } = order.payload;
    const invoice = { order: number, amount, tax: amount * TAX_RATE, total: amount * (1 + TAX_RATE) };
    // Throwing here (a failed push, say) nacks the order: it comes again,
    // and the same transaction id makes the retry harmless.
    const [result] = await client.push({
      queue: opts.results,
      partition: order.partition,
      payload: invoice,
      transactionId: transactionId('invoice', order.transactionId),
    });
    if (result.status === 'failed') throw new Error(`invoice push failed: ${result.error.message}`);
    if (result.status === 'duplicate') alreadyDone++;
    else invoiced++;
    console.log(`${order.partition} offset ${order.offset}: order ${number} -> invoice ${result.status}`);
  }, { group: opts.group, batch: 20, partitions: 4, signal: stop.signal });
  console.log(`stopped: ${totals.completed} orders acked, ${invoiced} invoiced, ${alreadyDone} already invoiced before`);
} finally {
  clearTimeout(idleTimer);
  await client.close();
}
