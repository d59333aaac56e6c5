// One socket to a sidecar, with requests pipelined on it: each call gets an
// id, many calls can be in flight at once, and answers, which come in
// whatever order the requests finish, are matched back by id.
import { EventEmitter } from 'node:events';
import { createConnection } from 'node:net';
import { decodeEnvelope, encodeEnvelope } from './codec/envelope.js';
import { FrameReader } from './codec/frame-reader.js';
import { ConnectionError, errorFromWire, localError } from './errors.js';
import { decodePayloads } from './results.js';

// After a request's timeoutMs the sidecar answers deadline_exceeded itself;
// the client gives it this much longer before it stops waiting on its own
// (a sidecar that answers nothing at all).
const LOCAL_DEADLINE_GRACE_MS = 1000;

// Only these two id-0 errors end a connection (PROTOCOL.md, section 2).
const FATAL_ID0_CODES = new Set(['frame_too_large', 'unauthorized']);

/**
 * Opens the Unix socket at path.
 * @param {string} path
 * @param {AbortSignal} [signal]
 * @returns {Promise<import('node:net').Socket>}
 */
export function openSocket(path, signal) {
  return new Promise((resolve, reject) => {
    signal?.throwIfAborted();
    const socket = createConnection({ path });
    const onAbort = () => {
      socket.destroy();
      reject(signal.reason);
    };
    const settle = () => signal?.removeEventListener('abort', onAbort);
    socket.once('connect', () => {
      settle();
      socket.removeAllListeners('error');
      resolve(socket);
    });
    socket.once('error', (err) => {
      settle();
      reject(new ConnectionError(`cannot connect to the sidecar at ${path}: ${err.message}`, { cause: err }));
    });
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * Events: 'draining' (the sidecar began to shut down), 'close' (the
 * connection ended; the argument is the error that ended it, if any),
 * 'notice' (a notice this client does not know), 'unmatchedError' (an
 * id-0 error that concerns no call, such as a bad_request whose id the
 * sidecar could not read).
 */
export class Connection extends EventEmitter {
  #socket;
  #reader = new FrameReader();
  #nextId = 1;
  #pending = new Map(); // id -> {op, resolve, reject}
  #late = new Map(); // id -> handler for the answer of a call given up on
  #closeError = null;
  #closedByClient = false;
  #closed;

  /**
   * @param {import('node:net').Socket} socket a connected socket
   * @param {string} socketPath
   */
  constructor(socket, socketPath) {
    super();
    this.#socket = socket;
    /** The path this client connected to. */
    this.socketPath = socketPath;
    /** True once the sidecar has announced that it is shutting down. */
    this.draining = false;
    /** The sidecar's frame limit, once known; larger requests are refused locally. */
    this.maxFrameBytes = undefined;
    this.#closed = new Promise((resolve) => socket.once('close', resolve));
    socket.on('data', (chunk) => this.#onData(chunk));
    socket.on('error', (err) => this.#fail(new ConnectionError(`connection to the sidecar failed: ${err.message}`, { cause: err })));
    socket.on('close', () => this.#fail(new ConnectionError('the sidecar closed the connection')));
  }

  /** Whether the connection has ended; every call then fails. */
  get closed() {
    return this.#closeError !== null;
  }

  /** How many calls are waiting for their answer. */
  get inFlight() {
    return this.#pending.size;
  }

  /**
   * Sends one request and resolves with its result, or rejects with a
   * QueensideError (or the signal's reason after an abort).
   * @param {string} op
   * @param {Record<string, unknown>} [args]
   * @param {{signal?: AbortSignal, timeoutMs?: number, onLateResult?: (result: any) => void}} [options]
   *   onLateResult receives the result of a call that was aborted or timed
   *   out locally but answered anyway (pop uses it to give leases back).
   */
  call(op, args, { signal, timeoutMs, onLateResult } = {}) {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason);
      if (this.#closeError) return reject(this.#closeError);
      if (this.draining && op !== 'health') {
        // After the notice the sidecar answers every new request but health
        // with draining, then closes the connection once its work in flight
        // is done. Answering here gives the same error without writing to a
        // socket about to close: a write that meets the close would destroy
        // the socket before the answers already sent to it are read.
        return reject(localError('draining', 'the sidecar is shutting down', op));
      }
      if (timeoutMs !== undefined && !(Number.isInteger(timeoutMs) && timeoutMs >= 0)) {
        return reject(new TypeError('timeoutMs must be an integer of 0 or more'));
      }
      const id = this.#nextId++;
      let frame;
      try {
        frame = encodeEnvelope({ id, op, args, timeoutMs: timeoutMs || undefined });
      } catch (err) {
        return reject(err);
      }
      if (this.maxFrameBytes !== undefined && frame.length - 4 > this.maxFrameBytes) {
        // The sidecar would close the connection over it, failing every
        // other call in flight; refusing it here fails this call alone.
        return reject(localError('frame_too_large',
          `a request of ${frame.length - 4} bytes is above the sidecar's frame limit of ${this.maxFrameBytes} bytes (its --max-frame-bytes): send fewer items a request, or raise the limit`, op));
      }

      let timer;
      const giveUp = (reason) => {
        if (!this.#pending.delete(id)) return;
        cleanup();
        if (onLateResult) this.#late.set(id, onLateResult);
        reject(reason);
      };
      const onAbort = () => giveUp(signal.reason);
      const cleanup = () => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
      };
      this.#pending.set(id, {
        op,
        resolve: (v) => { cleanup(); resolve(v); },
        reject: (e) => { cleanup(); reject(e); },
      });
      signal?.addEventListener('abort', onAbort, { once: true });
      if (timeoutMs) {
        timer = setTimeout(() => giveUp(localError('deadline_exceeded',
          `no answer within ${timeoutMs} ms`, op)), timeoutMs + LOCAL_DEADLINE_GRACE_MS);
      }
      this.#socket.write(frame);
    });
  }

  /**
   * Closes the connection. Calls still in flight fail with ConnectionError;
   * the sidecar still carries out what it received (a pop excepted: its
   * leases are given back at once).
   */
  async close() {
    this.#closedByClient = true;
    this.#fail(new ConnectionError('the client was closed'));
    await this.#closed;
  }

  #onData(chunk) {
    let bodies;
    try {
      bodies = this.#reader.push(chunk);
    } catch (err) {
      this.#fail(new ConnectionError(`unreadable data from the sidecar: ${err.message}`, { cause: err }));
      return;
    }
    for (const body of bodies) {
      if (this.#closeError) return;
      let envelope;
      try {
        envelope = decodeEnvelope(body);
      } catch (err) {
        this.#fail(new ConnectionError(`malformed frame from the sidecar: ${err.message}`, { cause: err }));
        return;
      }
      if (envelope.id === 0) this.#onIdZero(envelope);
      else this.#onAnswer(envelope);
    }
  }

  #onAnswer(envelope) {
    const call = this.#pending.get(envelope.id);
    if (!call) {
      const late = this.#late.get(envelope.id);
      this.#late.delete(envelope.id);
      if (late && envelope.result) late(decodePayloads(envelope.result));
      return;
    }
    this.#pending.delete(envelope.id);
    if (envelope.error) call.reject(errorFromWire(envelope.error, call.op));
    else call.resolve(decodePayloads(envelope.result ?? {}));
  }

  #onIdZero(envelope) {
    if (envelope.notice === 'draining') {
      this.draining = true;
      this.emit('draining');
    } else if (envelope.notice !== undefined) {
      this.emit('notice', envelope.notice);
    } else if (envelope.error) {
      const err = errorFromWire(envelope.error);
      if (FATAL_ID0_CODES.has(err.code)) this.#fail(err);
      else if (this.listenerCount('unmatchedError') > 0) this.emit('unmatchedError', err);
    }
  }

  // Ends the connection once, failing every call in flight with err.
  #fail(err) {
    if (this.#closeError) return;
    this.#closeError = err;
    this.#socket.destroy();
    const calls = [...this.#pending.values()];
    this.#pending.clear();
    this.#late.clear();
    for (const call of calls) call.reject(err);
    this.emit('close', this.#closedByClient ? undefined : err);
  }
}
