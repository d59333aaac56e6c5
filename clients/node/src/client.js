// The operations of the protocol (PROTOCOL.md, section 4), one method each,
// on top of a pipelined connection.
import { Connection, openSocket } from './connection.js';
import { consume } from './consume.js';
import { QueensideError, errorFromWire } from './errors.js';
import { wireAckItem, wirePushItem } from './items.js';
import { checkKeys } from './options.js';
import { MessageIterator } from './message-iterator.js';
import { DEFAULT_QUEUE_OPTIONS, QUEUE_OPTIONS } from './queue-options.js';
import { Backoff, mayRetry, pause, retryPolicy } from './retry.js';
import { defaultSocketPath } from './socket-path.js';
import { withTraceContext } from './tracing.js';
import { VERSION } from './version.js';

export const PROTOCOL_VERSION = 1;

export const CLIENT_NAME = `queenside-node/${VERSION}`;

// Generated from the sidecar's own table (queue-options.js).
export { DEFAULT_QUEUE_OPTIONS };

// Every method's last argument may carry these two next to the
// operation's own options; they go into the envelope, not into args.
const CALL_OPTIONS = ['signal', 'timeoutMs'];
const POP_OPTIONS = ['group', 'partition', 'batch', 'partitions', 'waitMs', 'autoAck', 'leaseSeconds', 'subscriptionMode', 'subscriptionFrom'];
const DLQ_FILTER = ['queue', 'group', 'partition', 'errorContains', 'deadFrom', 'deadTo'];
const DLQ_SELECTION = ['ids', ...DLQ_FILTER, 'afterId', 'limit'];
const DLQ_REPLAY_SELECTION = [...DLQ_SELECTION, 'includeReplayed'];

// The names each method's options object may have; any other is refused
// (options.js). Methods not listed take CALL_OPTIONS alone.
const OPTIONS = Object.fromEntries(Object.entries({
  connect: ['socket', 'client', 'hello', 'retry'],
  call: ['onLateResult'],
  hello: ['client', 'protocol'],
  pop: POP_OPTIONS,
  ackAndPop: POP_OPTIONS,
  renew: ['seconds'],
  configure: QUEUE_OPTIONS.map((o) => o.name),
  seek: ['partition'],
  dlq: ['group', 'partition', 'errorContains', 'deadFrom', 'deadTo', 'limit', 'afterId', 'count'],
  dlqReplayAll: ['includeReplayed', 'onProgress'],
  dlqSummary: ['limit'],
}).map(([method, own]) => [method, Object.freeze([...own, ...CALL_OPTIONS])]));

function optionNames(method) {
  return OPTIONS[method] ?? CALL_OPTIONS;
}

/**
 * Checks a method's options and splits them into the operation's
 * arguments and the call's options.
 */
function split(method, options) {
  checkKeys(method, options, optionNames(method));
  const { signal, timeoutMs, ...rest } = options ?? {};
  return [rest, { signal, timeoutMs }];
}

// The sidecar leaves out the options that are off (consumptionPaused,
// maxDeliveries 0...): a result names every option, as in the other clients.
function withDefaults(options) {
  return { ...DEFAULT_QUEUE_OPTIONS, ...options };
}

function list(value) {
  return Array.isArray(value) ? value : [value];
}

export class Client extends Connection {
  /**
   * Connects to a sidecar and, unless `hello: false`, says hello, which
   * checks the protocol version and learns the sidecar's frame limit.
   * @param {import('../index.js').ConnectOptions | string} [options] or a socket path
   * @returns {Promise<Client>}
   */
  static async connect(options = {}) {
    const opts = typeof options === 'string' ? { socket: options } : options ?? {};
    checkKeys('connect', opts, optionNames('connect'));
    const retry = retryPolicy(opts.retry); // a bad option fails before connecting
    const path = opts.socket ?? defaultSocketPath();
    const socket = await openSocket(path, opts.signal);
    const client = new Client(socket, path);
    client.#retry = retry;
    if (opts.hello !== false) {
      try {
        await client.hello({ client: opts.client, signal: opts.signal, timeoutMs: opts.timeoutMs });
      } catch (err) {
        await client.close();
        throw err;
      }
    }
    return client;
  }

  /** What the sidecar said of itself in the last hello, if any. */
  server = undefined;

  #retry = null;

  /**
   * Sends one request (see Connection.call). An answer of unavailable or
   * draining is sent again, with growing pauses, when the rule of retry.js
   * says a repeat cannot do harm, until the call's timeoutMs (or the
   * policy's maxElapsedMs without one); then the last answer is thrown.
   * Aborting the signal ends a pause at once.
   */
  async call(op, args, options = {}) {
    checkKeys(op, options, optionNames('call'));
    const policy = this.#retry;
    const started = Date.now();
    let backoff;
    let attempt = options;
    for (;;) {
      try {
        return await super.call(op, args, attempt);
      } catch (err) {
        // After the sidecar's drain notice no answer on this connection
        // will change: the caller should go to another sidecar, at once.
        if (!policy || !(err instanceof QueensideError) || this.draining || !mayRetry(op, args, err.code)) throw err;
        backoff ??= new Backoff(policy, options.timeoutMs, started);
        const ms = backoff.nextPause();
        if (ms === undefined) throw err;
        await pause(ms, options.signal);
        if (this.draining || this.closed) throw err;
        if (options.timeoutMs) attempt = { ...options, timeoutMs: backoff.remainingMs() };
      }
    }
  }

  async hello(options) {
    const [{ client = CLIENT_NAME, protocol = PROTOCOL_VERSION }, call] = split('hello', options);
    const result = await this.call('hello', { protocol, client }, call);
    this.server = result;
    this.maxFrameBytes = result.maxFrameBytes;
    return result;
  }

  async push(items, options) {
    const [, call] = split('push', options);
    const result = await this.call('push', { items: withTraceContext(list(items)).map(wirePushItem) }, call);
    return result.results;
  }

  async pop(queue, options) {
    const [args, call] = split('pop', options);
    return this.call('pop', { queue, ...args }, { ...call, onLateResult: (result) => this.#giveBack(result) });
  }

  // An aborted pop may still be answered with leases; giving them back at
  // once lets another consumer have the messages without waiting for the
  // leases to expire.
  #giveBack(popResult) {
    const ids = popResult?.leases?.map((l) => l.leaseId) ?? [];
    if (ids.length > 0 && !this.closed) this.release(ids).catch(() => {});
  }

  /** Items are ack items, or messages as pop returned them, acked completed. */
  async ack(items, options) {
    const [, call] = split('ack', options);
    return this.call('ack', { items: list(items).map(wireAckItem) }, call);
  }

  /**
   * Acks items (as ack takes them) and pops queue (options as pop takes
   * them) in one request: the sidecar applies the acks and serves the pop
   * in one transaction (revision 1.2), so the pop may deliver what the acks
   * released; a long-poll waits once the acks are committed. Resolves with
   * the ack's result, the pop's result in `pop` and, when the pop failed
   * once the acks were applied, its error (a QueensideError) in `popError`,
   * `pop` then empty. A sidecar of revision 1.1 ignores the pop: it is then
   * sent on its own, and its error, if any, is `popError`.
   */
  async ackAndPop(items, queue, options) {
    const [args, call] = split('ackAndPop', options);
    const result = await this.call(
      'ack',
      { items: list(items).map(wireAckItem), pop: { queue, ...args } },
      { ...call, onLateResult: (late) => this.#giveBack(late.pop) },
    );
    if (result.popError !== undefined) {
      result.popError = errorFromWire(result.popError, 'pop');
      result.pop ??= { messages: [], leases: [] };
    } else if (result.pop === undefined) {
      try {
        result.pop = await this.pop(queue, options);
      } catch (err) {
        if (!(err instanceof QueensideError)) throw err; // an abort
        // The acks were applied: their results are still the caller's.
        result.pop = { messages: [], leases: [] };
        result.popError = err;
      }
    }
    return result;
  }

  async renew(leaseIds, options) {
    const [{ seconds }, call] = split('renew', options);
    const result = await this.call('renew', { leaseIds: list(leaseIds), seconds }, call);
    return result.results;
  }

  async release(leaseIds, options) {
    const [, call] = split('release', options);
    const result = await this.call('release', { leaseIds: list(leaseIds) }, call);
    return result.results;
  }

  async transaction(items = {}, options) {
    checkKeys('transaction', items, ['acks', 'pushes'], 'key');
    const { acks = [], pushes = [] } = items ?? {};
    const [, call] = split('transaction', options);
    return this.call('transaction', { acks: acks.map(wireAckItem), pushes: withTraceContext(pushes).map(wirePushItem) }, call);
  }

  async configure(queue, options) {
    const [queueOptions, call] = split('configure', options);
    const result = await this.call('configure', { queue, options: queueOptions }, call);
    return { ...result, options: withDefaults(result.options) };
  }

  async queues(options) {
    const [, call] = split('queues', options);
    const result = await this.call('queues', {}, call);
    return (result.queues ?? []).map((q) => ({ ...q, options: withDefaults(q.options) }));
  }

  async stats(queue, options) {
    const [, call] = split('stats', options);
    return this.call('stats', { queue }, call);
  }

  async groups(queue, options) {
    if (typeof queue === 'object' && queue !== null) [queue, options] = [undefined, queue];
    const [, call] = split('groups', options);
    const result = await this.call('groups', { queue }, call);
    return result.groups;
  }

  async seek(queue, group, to, options) {
    const [{ partition }, call] = split('seek', options);
    const result = await this.call('seek', { queue, group, partition, to }, call);
    return result.cursors;
  }

  async deleteGroup(queue, group, options) {
    const [, call] = split('deleteGroup', options);
    const result = await this.call('deleteGroup', { queue, group }, call);
    return result.deleted;
  }

  async dlq(queue, options) {
    const [args, call] = split('dlq', options);
    return this.call('dlq', { queue, ...args }, call);
  }

  async dlqReplay(ids, options) {
    const [, call] = split('dlqReplay', options);
    const result = await this.call('dlqReplay', { ids: list(ids) }, call);
    return result.results;
  }

  /**
   * Replays dead letters named by ids, or one batch of a filter
   * ({queue, group?, partition?, errorContains?, deadFrom?, deadTo?,
   * afterId?, limit?, includeReplayed?}): the whole reply, with
   * nextAfterId when another batch follows (revision 1.2).
   */
  async dlqReplayBatch(selection, options) {
    checkKeys('dlqReplayBatch', selection, DLQ_REPLAY_SELECTION, 'key');
    const [, call] = split('dlqReplayBatch', options);
    return this.call('dlqReplay', selection, call);
  }

  /**
   * Replays every dead letter filter matches, a batch at a time, entries
   * replayed already skipped unless includeReplayed; onProgress gets each
   * batch's reply. Resolves with the counts {replayed, skipped, failed}.
   */
  async dlqReplayAll(filter, options) {
    checkKeys('dlqReplayAll', filter, DLQ_FILTER, 'key');
    checkKeys('dlqReplayAll', options, optionNames('dlqReplayAll'));
    const { includeReplayed = false, onProgress, ...callOptions } = options ?? {};
    const total = { replayed: 0, skipped: 0, failed: 0 };
    let afterId;
    for (;;) {
      const reply = await this.dlqReplayBatch({ ...filter, afterId, includeReplayed }, callOptions);
      for (const k of Object.keys(total)) total[k] += reply[k] ?? 0;
      onProgress?.(reply);
      if (reply.nextAfterId === undefined) return total;
      afterId = reply.nextAfterId;
    }
  }

  /** Deletes dead letters named by ids, or one batch of a filter: {deleted, nextAfterId?}. */
  async dlqDelete(selection, options) {
    checkKeys('dlqDelete', selection, DLQ_SELECTION, 'key');
    const [, call] = split('dlqDelete', options);
    return this.call('dlqDelete', selection, call);
  }

  /** Deletes every dead letter filter matches, a batch at a time; resolves with how many. */
  async dlqDeleteAll(filter, options) {
    checkKeys('dlqDeleteAll', filter, DLQ_FILTER, 'key');
    checkKeys('dlqDeleteAll', options, optionNames('dlqDeleteAll'));
    let deleted = 0;
    let afterId;
    for (;;) {
      const reply = await this.dlqDelete({ ...filter, afterId }, options);
      deleted += reply.deleted;
      if (reply.nextAfterId === undefined) return deleted;
      afterId = reply.nextAfterId;
    }
  }

  /** Dead letters of queue (every queue's without) counted by group and error, most frequent first. */
  async dlqSummary(queue, options) {
    if (typeof queue === 'object' && queue !== null) [queue, options] = [undefined, queue];
    const [args, call] = split('dlqSummary', options);
    const result = await this.call('dlqSummary', { queue, ...args }, call);
    return result.errors;
  }

  async health(options) {
    const [, call] = split('health', options);
    return this.call('health', {}, call);
  }

  /** Consumes queue as an async iterator (see message-iterator.js). */
  messages(queue, options) {
    return new MessageIterator(this, queue, options);
  }

  /** Runs handler over queue's messages until stopped (see consume.js). */
  consume(queue, handler, options) {
    return consume(this, queue, handler, options);
  }
}

/** Same as Client.connect. */
export function connect(options) {
  return Client.connect(options);
}
