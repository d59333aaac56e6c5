// client.consume(): a worker loop around a handler.
//
// Each of `concurrency` loops pops (long-poll), hands the messages to the
// handler one at a time, in offset order, and acks once per pop: completed
// when the handler returned (or its promise resolved), failed when it threw
// (or rejected). A failure ends that lease: the failed message and the rest
// of its partition's span come again, and the failure is charged to the
// message's retry budget, so a message that always fails is dead-lettered
// once the queue's retryLimit is used up. Leases are renewed while handlers
// run. Since every lease holds a partition, the loops hold different
// partitions, and the messages of one partition are never handled by two
// handlers at once.
//
// Stopping (the `signal` option, or SIGINT/SIGTERM with `stopOnSignals`)
// lets the handler in progress finish, acks what was done, and releases the
// rest so that another consumer gets it at once. A handler that throws
// because it was stopped is not charged.
import { STOPPED, popUntilMessages } from './pop-loop.js';
import { LeasedBatch } from './leased-batch.js';
import { stopSignal } from './stop-signal.js';
import { runInConsumerSpan } from './tracing.js';

/**
 * @param {import('./client.js').Client} client
 * @param {string} queue
 * @param {(message: any, context: {signal: AbortSignal}) => unknown} handler
 * @param {import('../index.js').ConsumeOptions} [options]
 * @returns {Promise<{completed: number, failed: number}>} what the sidecar recorded
 */
export async function consume(client, queue, handler, options = {}) {
  if (typeof handler !== 'function') throw new TypeError('consume needs a handler function');
  const concurrency = options.concurrency ?? 1;
  if (!Number.isInteger(concurrency) || concurrency < 1) throw new TypeError('concurrency must be an integer of 1 or more');

  // The loops share one stop signal; the first loop that fails stops the
  // others, so that consume() settles everything before it rejects.
  const failure = new AbortController();
  const stop = stopSignal(options, failure.signal);
  const totals = { completed: 0, failed: 0 };
  let firstError;
  const loop = async () => {
    try {
      await consumeLoop(client, queue, handler, options, stop.signal, totals);
    } catch (err) {
      firstError ??= err;
      failure.abort(err);
    }
  };
  try {
    await Promise.all(Array.from({ length: concurrency }, loop));
  } finally {
    stop.dispose();
  }
  if (firstError !== undefined) throw firstError;
  return totals;
}

async function consumeLoop(client, queue, handler, options, stop, totals) {
  for (;;) {
    const result = await popUntilMessages(client, queue, options, stop);
    if (result === STOPPED) return;
    const batch = new LeasedBatch(client, result, options);
    try {
      await handleBatch(batch, handler, options.group, stop);
    } finally {
      const counts = await batch.settle();
      totals.completed += counts.completed;
      totals.failed += counts.failed;
    }
  }
}

async function handleBatch(batch, handler, group, stop) {
  for (let m = batch.nextMessage(); m !== undefined; m = batch.nextMessage()) {
    if (stop.aborted) return; // the rest is released by settle()
    try {
      // With OpenTelemetry, the handler runs inside the message's span.
      await runInConsumerSpan(m, group, () => handler(m, { signal: stop }));
      batch.complete(m);
    } catch (err) {
      // Interrupted by the stop rather than failed on its own: leave it
      // unsettled, so that it is released and charged nothing.
      if (stop.aborted) return;
      batch.fail(m, err);
    }
  }
}
