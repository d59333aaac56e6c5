// Acks that do not hold the consume loop up (consume() with ackAsync).
//
// A batch whose messages all completed hands its ack items here, and its
// loop pops again at once. At most one ack call is in flight; the items
// added meanwhile, by any batch or lease, go together in the next
// call. A batch's leases are renewed until its ack is answered, since an
// ack is only valid while its lease lives.
//
// Nothing is retried: items the sidecar refused, or the items of a call
// that failed, are reported as an AckError (to onAckError, or as the error
// that ends consume()), and their messages will be delivered again. An
// item answered already_acked succeeded earlier (an ack whose answer was
// lost): it is no error.
import { ALREADY_ACKED, describeAckItem } from './ack-codes.js';

/** Ack items that did not succeed: the cursor did not move for them. */
export class AckError extends Error {
  /**
   * @param {object[]} items the ack items that did not succeed
   * @param {{codes?: string[], indices?: number[], cause?: unknown}} [why] the sidecar's code for each
   *   item and the item's position in its call, or the error of the call
   */
  constructor(items, { codes, indices, cause } = {}) {
    const what = cause !== undefined
      ? `ack of ${items.length} item(s) failed: ${cause?.message ?? cause}`
      : codes.map((code, i) => describeAckItem(indices?.[i] ?? i, code)).join('; ');
    super(`${what}; those messages will be delivered again`, cause === undefined ? undefined : { cause });
    this.name = 'AckError';
    this.items = items;
    /** Per item, the sidecar's code (lease_expired...); undefined when the call itself failed. */
    this.codes = codes;
  }
}

export class AckBatcher {
  #client;
  #onError;
  #fail;
  #pending = [];
  #done = [];
  #added = 0; // items added so far
  #answered = 0; // items whose call came back
  #waiters = []; // [upto, resolve]: resolved once #answered reaches upto
  #running = null; // the flush in progress

  /**
   * @param {import('./client.js').Client} client
   * @param {{onAckError?: (err: AckError) => void, fail: (err: AckError) => void}} how
   */
  constructor(client, { onAckError, fail }) {
    this.#client = client;
    this.#onError = onAckError;
    this.#fail = fail;
  }

  /** Queues ack items; done() is called once they were answered. */
  add(items, done) {
    this.#pending.push(...items);
    this.#added += items.length;
    if (done) this.#done.push(done);
    this.#running ??= this.#flush();
  }

  /** Whether acks are waiting or in flight: their leases still hold partitions. */
  get busy() {
    return this.#answered < this.#added;
  }

  /** Resolves once every item added so far was answered. */
  wait() {
    if (this.#answered >= this.#added) return Promise.resolve();
    return new Promise((resolve) => this.#waiters.push([this.#added, resolve]));
  }

  async #flush() {
    while (this.#pending.length > 0 || this.#done.length > 0) {
      const items = this.#pending;
      const done = this.#done;
      const upto = this.#added;
      this.#pending = [];
      this.#done = [];
      if (items.length > 0) await this.#send(items);
      // Only now may renewals stop: a lapsed lease would refuse the ack.
      for (const f of done) f();
      this.#answered = upto;
      this.#waiters = this.#waiters.filter(([at, resolve]) => (at <= upto ? (resolve(), false) : true));
    }
    this.#running = null;
  }

  async #send(items) {
    let results;
    try {
      ({ results } = await this.#client.ack(items, { timeoutMs: 10_000 }));
    } catch (err) {
      this.#report(new AckError(items, { cause: err }));
      return;
    }
    const refused = [];
    const codes = [];
    const indices = [];
    for (const r of results) {
      if (!r.success && r.code !== ALREADY_ACKED && items[r.index]) {
        refused.push(items[r.index]);
        codes.push(r.code);
        indices.push(r.index);
      }
    }
    if (refused.length > 0) this.#report(new AckError(refused, { codes, indices }));
  }

  #report(err) {
    if (!this.#onError) {
      this.#fail(err);
      return;
    }
    try {
      this.#onError(err);
    } catch {
      // The app's callback must not stop the acks of the other batches.
    }
  }
}
