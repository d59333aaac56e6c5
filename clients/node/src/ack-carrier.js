// Acks carried by the next pop (consume() without ackAsync).
//
// A batch settled by its acks alone (completions and failures, nothing to
// release) is held here, and the loop's next pop carries its acks in one
// ackAndPop request: the sidecar applies them and serves the pop in one
// transaction (PROTOCOL.md, ack, revision 1.2), so a batch costs one round
// trip instead of two. Each consume() has its own carrier: at most one batch is
// held at a time, the one just handled.
//
// - The carrying call does not wait: it goes with waitMs 0 and without the
//   stop signal, so that its answer, which says what the sidecar recorded
//   of the acks, always comes (an aborted call would leave that unknown,
//   and a stop must not wait for a long-poll). When it brings nothing, the
//   loop long-polls with a plain pop, which a stop ends at once.
// - A pop that fails once the acks were applied (popError) is thrown as
//   the pop's error: the loop handles it as a failed pop.
// - A call that fails as a whole keeps the batch held and throws; the
//   loop then flushes it with a plain ack (sending an ack again is safe,
//   whether or not the first one was applied), as it was settled before.
// - When the loop stops, flush() sends what is held with a plain ack.

export class AckCarrier {
  #client;
  #held; // the LeasedBatch whose acks the next pop carries

  /**
   * @param {import('./client.js').Client} client
   */
  constructor(client) {
    this.#client = client;
  }

  /**
   * Holds batch for the next pop when its acks alone settle it.
   * @param {import('./leased-batch.js').LeasedBatch} batch
   * @returns {boolean} false when the batch must be settled on its own
   */
  hold(batch) {
    if (!batch.carriable()) return false;
    this.#held = batch;
    return true;
  }

  /**
   * Pops, carrying the acks of the batch held, if any.
   * @returns {Promise<{messages: any[], leases: any[]}>} the pop's result
   */
  async pop(queue, args) {
    const batch = this.#held;
    if (batch === undefined) return this.#client.pop(queue, args);
    const res = await this.#client.ackAndPop(batch.takeAcks(), queue, { ...args, waitMs: 0, signal: undefined });
    this.#held = undefined;
    batch.noteRefused(res.results);
    if (res.popError !== undefined) throw res.popError;
    return res.pop;
  }

  /** Sends the acks still held with a plain ack: no pop will carry them. */
  async flush() {
    const batch = this.#held;
    if (batch === undefined) return;
    this.#held = undefined;
    await batch.settle();
  }
}
