// client.messages(): consumption as an async iterator.
//
//   for await (const msg of client.messages('orders', { group: 'billing' })) {
//     await bill(msg.payload);
//   }
//
// When a message counts as done (see also README, "Consuming"):
// - completed: when the loop asks for the next message, i.e. the loop body
//   ran to its end (or `continue`d) for this one;
// - failed: when the loop is left while the message is in hand, by an
//   exception, `break` or `return`. An iterator cannot tell a `break` from
//   an exception, and failing is what keeps a message that always throws
//   from being retried forever: its retry budget runs out and it is
//   dead-lettered. To leave the loop after a message that went well, call
//   msg.complete() before `break`, or stop through the `signal` option.
// - msg.complete() / msg.fail(reason) settle a message explicitly, before
//   either of the above.
// Completions and failures are sent in one ack per pop, when its messages
// are used up or the loop ends; leases are renewed meanwhile.
//
// With OpenTelemetry, each message has a consumer span from the moment it is
// handed out until the loop leaves it (the next message, or the loop's
// end), failed if the message was. An iterator cannot make it the active
// span of the loop body; msg.traceContext is that span's context, for
// `context.with(msg.traceContext, ...)`.
import { messagesOptions } from './consumer-options.js';
import { STOPPED, popUntilMessages } from './pop-loop.js';
import { LeasedBatch } from './leased-batch.js';
import { stopSignal } from './stop-signal.js';
import { startConsumerSpan } from './tracing.js';

const LEFT_LOOP_REASON = 'the loop over messages ended while this message was in hand';

export class MessageIterator {
  #client;
  #queue;
  #options;
  #stop; // created by the first next(): an iterator never used holds no signal
  #batch = null;
  #inHand = null;
  #span; // of the message in hand, with OpenTelemetry
  #done = false;
  #totals = { completed: 0, failed: 0 };

  /**
   * @param {import('./client.js').Client} client
   * @param {string} queue
   * @param {import('../index.js').MessagesOptions} options
   */
  constructor(client, queue, options) {
    this.#client = client;
    this.#queue = queue;
    this.#options = messagesOptions(options);
  }

  [Symbol.asyncIterator]() {
    return this;
  }

  /** How many messages were completed and failed so far. */
  get totals() {
    return { ...this.#totals };
  }

  async next() {
    if (this.#done) return { done: true, value: undefined };
    this.#stop ??= stopSignal(this.#options);
    try {
      if (this.#inHand) {
        this.#batch.complete(this.#inHand);
        this.#inHand = null;
        this.#endSpan();
      }
      for (;;) {
        // Stopping ends the loop between two messages; the rest of the
        // batch is released at once, charged nothing.
        if (this.#stop.signal.aborted) return await this.#finish();
        const message = this.#batch?.nextMessage();
        if (message) {
          this.#span = startConsumerSpan(message, this.#options.group);
          this.#inHand = this.#decorate(message, this.#span);
          return { done: false, value: this.#inHand };
        }
        await this.#settleBatch();
        const result = await popUntilMessages(this.#client, this.#queue, this.#options, this.#stop.signal);
        if (result === STOPPED) return await this.#finish();
        this.#batch = new LeasedBatch(this.#client, result, this.#options);
      }
    } catch (err) {
      await this.#finish().catch(() => {});
      throw err;
    }
  }

  /** Called by `for await` when the loop is left early (break, return, throw). */
  async return() {
    if (this.#inHand && !this.#batch.isSettled(this.#inHand)) {
      this.#batch.fail(this.#inHand, LEFT_LOOP_REASON);
      this.#span?.fail(LEFT_LOOP_REASON);
    }
    return this.#finish();
  }

  async #finish() {
    this.#done = true;
    this.#inHand = null;
    this.#endSpan();
    this.#stop?.dispose();
    await this.#settleBatch();
    return { done: true, value: undefined };
  }

  async #settleBatch() {
    const batch = this.#batch;
    this.#batch = null;
    if (!batch) return;
    this.#totals.completed += batch.counts.completed;
    this.#totals.failed += batch.counts.failed;
    await batch.settle();
  }

  #endSpan() {
    this.#span?.end();
    this.#span = undefined;
  }

  // Adds complete(), fail() and traceContext to a message, not enumerable
  // so that the message still prints and serialises as plain data.
  #decorate(message, span) {
    const batch = this.#batch;
    return Object.defineProperties(message, {
      complete: { value: () => batch.complete(message) },
      fail: {
        value: (reason) => {
          if (!batch.isSettled(message)) span?.fail(reason);
          batch.fail(message, reason);
        },
      },
      traceContext: { value: span?.context },
    });
  }
}
