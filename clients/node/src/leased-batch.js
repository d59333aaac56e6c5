// The messages of one pop while they are being handled: which are done,
// which failed, and, at the end, the single ack (and release) that reports
// it all to the sidecar. Shared by messages() and consume().
import { completed, failed } from './items.js';
import { keepLeasesAlive } from './lease-keeper.js';
import { ConnectionError } from './errors.js';
import { ALREADY_ACKED, describeAckItem } from './ack-codes.js';

const SETTLE_ATTEMPTS = 3;
const SETTLE_BACKOFF_MS = 200;

export class LeasedBatch {
  #client;
  #messages;
  #next = 0;
  #acks = []; // ack items, in the order messages were settled
  #acked = []; // the message of each ack item
  #settled = new Set(); // messages completed or failed (each has an ack item)
  #failedLeases = new Set(); // leases whose rest will come again (rewound)
  #stopRenewing;
  #logger;
  /** How many messages were completed and failed: the handler's outcomes. */
  counts = { completed: 0, failed: 0 };

  /**
   * @param {import('./client.js').Client} client
   * @param {{messages: any[], leases: any[]}} popResult
   * @param {{leaseSeconds?: number, renewEveryMs?: number, logger?: {warn: Function}}} options
   *   logger, when given, is told of every ack item the sidecar refuses
   */
  constructor(client, popResult, options) {
    this.#client = client;
    this.#logger = options.logger;
    this.#messages = popResult.messages;
    this.leases = popResult.leases;
    this.#stopRenewing = keepLeasesAlive(client, popResult.leases, options);
  }

  /**
   * The next message to handle, or undefined when the batch is used up.
   * After a failure the rest of that lease is skipped: the failure rewinds
   * the group's cursor, so those messages come again in a later pop.
   */
  nextMessage() {
    while (this.#next < this.#messages.length) {
      const m = this.#messages[this.#next++];
      if (!this.#failedLeases.has(m.leaseId)) return m;
    }
    return undefined;
  }

  /**
   * The messages grouped by lease (one lease holds one partition), each
   * group in offset order, the groups in the order the pop returned them:
   * a pop's messages come partition by partition, so handling the groups
   * one after another is handling the messages in the pop's order.
   * @returns {any[][]}
   */
  spans() {
    const byLease = new Map();
    for (const m of this.#messages) {
      const span = byLease.get(m.leaseId);
      if (span === undefined) byLease.set(m.leaseId, [m]);
      else span.push(m);
    }
    return [...byLease.values()];
  }

  /** Whether the message was already completed or failed. */
  isSettled(message) {
    return this.#settled.has(message);
  }

  complete(message) {
    if (this.#settled.has(message)) return;
    this.#settled.add(message);
    this.#acks.push(completed(message));
    this.#acked.push(message);
    this.counts.completed++;
  }

  fail(message, reason) {
    if (this.#settled.has(message)) return;
    this.#settled.add(message);
    this.#acks.push(failed(message, reason));
    this.#acked.push(message);
    this.#failedLeases.add(message.leaseId);
    this.counts.failed++;
  }

  /**
   * How many times message has failed, this time included, as the lease
   * counts it: its headAttempts when message is the first of its lease,
   * else 1 (the messages before it in the lease went well).
   */
  failures(message) {
    const lease = this.leases.find((l) => l.leaseId === message.leaseId);
    if (lease === undefined || String(lease.fromOffset) !== String(message.offset)) return 1;
    return Math.max(1, Number(lease.headAttempts) || 1);
  }

  /**
   * With ackAsync: when every message of the batch completed, hands the
   * acks to acker and returns true; the leases are renewed until the ack
   * is answered. Otherwise returns false, and settle() must be called: a
   * failure or a release is settled before the next pop, as without
   * ackAsync, which keeps the rewind and the release after the acks.
   * @param {import('./ack-batcher.js').AckBatcher} acker
   */
  handOff(acker) {
    if (this.#acks.length === 0 || this.#failedLeases.size > 0) return false;
    if (this.#messages.some((m) => !this.#settled.has(m))) return false;
    acker.add(this.#acks, this.#stopRenewing);
    return true;
  }

  /**
   * Without ackAsync: whether the batch is settled by its acks alone
   * (completions and failures alike, no lease to release), so that the
   * next pop may carry them (ackAndPop). A batch that a stop cut short
   * still holds messages to release, and is settled on its own.
   */
  carriable() {
    return this.#acks.length > 0 && this.#unfinishedLeases().size === 0;
  }

  /**
   * Stops renewing and returns the ack items, for the request that carries
   * them with the next pop. It is sent at once, as settle()'s ack is: the
   * leases were renewed a third of their time ago at most, plenty for one
   * call, and a renewal racing the acks that end the leases would only be
   * refused.
   */
  takeAcks() {
    this.#stopRenewing();
    return this.#acks;
  }

  /**
   * Logs the acks of this batch the sidecar refused, from their results.
   * already_acked is no refusal: an earlier ack of it was applied (whose
   * answer was lost, say), and nothing is lost.
   * @param {Array<{index: number, success: boolean, code?: string}>} results
   */
  noteRefused(results) {
    for (const r of results) {
      if (r.success || r.code === ALREADY_ACKED || this.#acks[r.index] === undefined) continue;
      this.#refused(r, this.#acked[r.index]);
    }
  }

  // lease_expired and the like: the message comes again.
  #refused(result, message) {
    if (this.#logger === undefined) return;
    try {
      this.#logger.warn(`queenside: ${describeAckItem(result.index, result.code)}, queue ${message.queue}, partition ${message.partition}, offset ${message.offset}: the message will be delivered again`);
    } catch {
      // A logger that fails must not cost the acks.
    }
  }

  /**
   * Ends the batch: stops renewing, acks what was completed or failed, and
   * releases every lease that still holds messages neither completed nor
   * failed (a consumer that stops early), so that they go to another
   * consumer at once instead of when the lease expires. No retry budget is
   * charged for those.
   */
  async settle() {
    this.#stopRenewing();
    if (this.#acks.length > 0) {
      const { results } = await this.#retrying((o) => this.#client.ack(this.#acks, o));
      this.noteRefused(results);
    }
    const unfinished = this.#unfinishedLeases();
    if (unfinished.size > 0) {
      await this.#retrying((o) => this.#client.release([...unfinished], o));
    }
  }

  // The leases still holding messages neither completed nor failed; a
  // failed lease was already ended by its failure.
  #unfinishedLeases() {
    const unfinished = new Set();
    for (const m of this.#messages) {
      if (!this.#settled.has(m) && !this.#failedLeases.has(m.leaseId)) unfinished.add(m.leaseId);
    }
    return unfinished;
  }

  // Acks and releases are safe to repeat (PROTOCOL.md, ack), so a retryable
  // answer is tried again a few times before the error is passed on.
  async #retrying(send) {
    for (let attempt = 1; ; attempt++) {
      try {
        return await send({ timeoutMs: 10_000 });
      } catch (err) {
        if (!err?.retryable || err instanceof ConnectionError || attempt >= SETTLE_ATTEMPTS) throw err;
        await new Promise((r) => setTimeout(r, SETTLE_BACKOFF_MS * attempt));
      }
    }
  }
}
