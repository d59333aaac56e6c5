// The popping half of a consumer: long-poll until messages come, wait and
// try again on retryable errors, and stop when told to.
import { setTimeout as sleep } from 'node:timers/promises';
import { ConnectionError } from './errors.js';

/** Returned instead of a pop result when the stop signal ended the wait. */
export const STOPPED = Symbol('stopped');

const FIRST_BACKOFF_MS = 250;
const MAX_BACKOFF_MS = 5000;

/**
 * Pops queue until a pop brings leased messages, or stop is aborted.
 * @param {import('./client.js').Client} client
 * @param {string} queue
 * @param {import('../index.js').ConsumerOptions} options with their defaults (consumer-options.js)
 * @param {AbortSignal} stop
 * @param {import('./ack-batcher.js').AckBatcher} [acker] with ackAsync, the acks still pending
 * @param {import('./ack-carrier.js').AckCarrier} [carrier] without it, the acks the next pop carries
 * @returns {Promise<{messages: any[], leases: any[]} | typeof STOPPED>}
 */
export async function popUntilMessages(client, queue, options, stop, acker, carrier) {
  const args = {
    group: options.group,
    partition: options.partition,
    batch: options.batch,
    partitions: options.partitions,
    waitMs: options.waitMs,
    leaseSeconds: options.leaseSeconds,
    subscriptionMode: options.subscriptionMode,
    subscriptionFrom: options.subscriptionFrom,
    signal: stop,
  };
  let backoff = FIRST_BACKOFF_MS;
  while (!stop.aborted) {
    // Pending acks hold their leases' partitions, and a lease ended by an
    // ack wakes no waiting pop: look without waiting then, and wait for
    // those acks if nothing came.
    const acksPending = acker?.busy ?? false;
    try {
      const popArgs = acksPending ? { ...args, waitMs: 0 } : args;
      const result = await (carrier ? carrier.pop(queue, popArgs) : client.pop(queue, popArgs));
      if (result.leases.length > 0) return result;
      backoff = FIRST_BACKOFF_MS;
      if (acksPending) await acker.wait();
    } catch (err) {
      // Acks whose carrying call failed as a whole go on their own now, as
      // they went before the pop without a carrier; a failure to send them
      // ends the loop, as a failed settle does.
      await carrier?.flush();
      if (stop.aborted) break;
      // A closed client cannot get better by waiting; nor can a request the
      // sidecar refuses as it stands (invalid_argument and the like).
      if (err instanceof ConnectionError || !err?.retryable) throw err;
      try {
        await sleep(backoff, undefined, { signal: stop });
      } catch {
        break;
      }
      backoff = Math.min(backoff * 2, MAX_BACKOFF_MS);
    }
  }
  return STOPPED;
}
