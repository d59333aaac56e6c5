// client.consume(): a worker loop around a handler.
//
// One loop pops (long-poll), hands the messages to the handler, and acks
// once per pop: completed when the handler returned (or its promise
// resolved), failed when it threw (or rejected). A pop's messages are
// grouped by lease (one lease holds one partition): each lease's messages
// go to the handler one after another, in offset order, and up to
// `concurrency` handler calls run at once, each on a different lease, so
// that the messages of one partition are never handled by two handlers at
// once. With concurrency 1 the messages are handled one at a time, in the
// order the pop returned them. The pop's acks go once every lease of it is
// done. A failure ends that lease: the failed message and the rest of its
// partition's span come again, and the failure is charged to the
// message's retry budget, so a message that always fails is dead-lettered
// once the queue's retryLimit is used up. Leases are renewed while
// handlers run.
//
// Without `ackAsync`, a batch's acks are carried by the loop's next pop
// (ack-carrier.js): one ackAndPop request a batch, acks and pop in one
// transaction. A batch cut short by a stop (it has leases to release) is
// settled on its own; when the loop stops, the acks it still holds are
// sent with a plain ack before consume() settles.
//
// Stopping (the `signal` option, or SIGINT/SIGTERM unless `stopOnSignals:
// false`) lets the handlers in progress finish, acks what was done, and
// releases the rest so that another consumer gets it at once. A handler
// that throws because it was stopped is not charged. A stop does not wait
// for a long-poll: the pop in flight is aborted.
//
// A handler failure is logged (the `logger` option, console by default),
// then its lease's messages wait a growing delay (`failureBackoff`) before
// the failure is acked: the lease is renewed meanwhile, so the partition
// waits, in order, and the retry budget is charged once per failure, as
// without the delay. The other leases of the pop go on meanwhile. A stop
// ends the delay at once.
//
// With `ackAsync: true`, a batch whose messages all completed does not wait
// for its ack: the ack goes in the background (ack-batcher.js) while the
// loop pops again, merged with whatever else completed meanwhile. A batch
// with a failure or a release is settled before the next pop, as without
// it. A failed ack goes to `onAckError` as an AckError; without that
// callback it ends consume(), which rejects with it. consume() resolves or
// rejects only once every pending ack was answered.
import { setTimeout as sleep } from 'node:timers/promises';
import { AckBatcher } from './ack-batcher.js';
import { AckCarrier } from './ack-carrier.js';
import { consumeOptions, failureDelayMs } from './consumer-options.js';
import { STOPPED, popUntilMessages } from './pop-loop.js';
import { LeasedBatch } from './leased-batch.js';
import { stopSignal } from './stop-signal.js';
import { runInConsumerSpan } from './tracing.js';

/**
 * @param {import('./client.js').Client} client
 * @param {string} queue
 * @param {(message: any, context: {signal: AbortSignal}) => unknown} handler
 * @param {import('../index.js').ConsumeOptions} [options]
 * @returns {Promise<{completed: number, failed: number}>} the messages whose handler returned, and failed
 */
export async function consume(client, queue, handler, options) {
  if (typeof handler !== 'function') {
    throw new TypeError(`consume needs a handler: a function called with each message, not ${handler === null ? 'null' : typeof handler}`);
  }
  const opts = consumeOptions(options);

  // A failed background ack (ackAsync without onAckError) stops the loop
  // through the stop signal, so that consume() settles everything before
  // it rejects.
  const failure = new AbortController();
  const stop = stopSignal(opts, failure.signal);
  const totals = { completed: 0, failed: 0 };
  let firstError;
  const fail = (err) => {
    firstError ??= err;
    failure.abort(err);
  };
  const acker = opts.ackAsync ? new AckBatcher(client, { onAckError: opts.onAckError, fail }) : undefined;
  try {
    await consumeLoop(client, queue, handler, opts, stop.signal, totals, acker);
  } catch (err) {
    fail(err);
  } finally {
    await acker?.wait(); // the loop has ended: this is every pending ack
    stop.dispose();
  }
  if (firstError !== undefined) throw firstError;
  return totals;
}

async function consumeLoop(client, queue, handler, options, stop, totals, acker) {
  const carrier = acker ? undefined : new AckCarrier(client);
  try {
    for (;;) {
      const result = await popUntilMessages(client, queue, options, stop, acker, carrier);
      if (result === STOPPED) break;
      const batch = new LeasedBatch(client, result, options);
      try {
        await handleBatch(batch, handler, options, stop);
      } finally {
        totals.completed += batch.counts.completed;
        totals.failed += batch.counts.failed;
      }
      if (acker && batch.handOff(acker)) continue;
      if (carrier?.hold(batch)) continue;
      await batch.settle();
    }
  } catch (err) {
    // Whatever ended the loop is what consume() rejects with; the acks
    // held are still sent, as far as they can be.
    await carrier?.flush().catch(() => {});
    throw err;
  }
  await carrier?.flush(); // stopped: no next pop will carry them
}

// Handles a pop's leases, up to `concurrency` at once: each worker takes
// the next lease not yet started and handles its messages in order. A stop
// starts no further message; the leases not reached are released by
// settle().
async function handleBatch(batch, handler, options, stop) {
  const spans = batch.spans();
  let next = 0;
  const worker = async () => {
    while (next < spans.length && !stop.aborted) {
      await handleSpan(batch, spans[next++], handler, options, stop);
    }
  };
  await Promise.all(Array.from({ length: Math.min(options.concurrency, spans.length) }, worker));
}

// One lease's messages, one after another.
async function handleSpan(batch, span, handler, options, stop) {
  for (const m of span) {
    if (stop.aborted) return; // the rest is released by settle()
    try {
      // With OpenTelemetry, the handler runs inside the message's span.
      await runInConsumerSpan(m, options.group, () => handler(m, { signal: stop }));
      batch.complete(m);
    } catch (err) {
      // Interrupted by the stop rather than failed on its own: leave it
      // unsettled, so that it is released and charged nothing.
      if (stop.aborted) return;
      batch.fail(m, err);
      await holdFailure(batch, m, err, options, stop);
      return; // the failure rewinds the lease: the rest of it comes again
    }
  }
}

// Logs a failure, then waits before its ack goes, the lease renewed
// meanwhile; a stop ends the wait at once.
async function holdFailure(batch, message, err, { logger, failureBackoff }, stop) {
  const failures = batch.failures(message);
  const delayMs = failureDelayMs(failures, failureBackoff);
  const where = `queue ${message.queue}, partition ${message.partition}, offset ${message.offset}`;
  try {
    logger.warn(`queenside: handler failed (${where}, failure ${failures}): ${errorText(err)}; retrying in ${delayMs} ms unless the queue's retryLimit is used up`);
  } catch {
    // A logger that fails must not stop the loop.
  }
  if (delayMs > 0) await sleep(delayMs, undefined, { signal: stop }).catch(() => {});
}

function errorText(err) {
  if (err instanceof Error) return String(err); // "Error: message"
  try {
    return typeof err === 'string' ? err : JSON.stringify(err) ?? String(err);
  } catch {
    return String(err);
  }
}
