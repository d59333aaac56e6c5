// Retries of calls answered `unavailable` or `draining`: the rule, and the
// pauses. The rule is the same in the three clients (clients/README.md,
// "Retries"): a call is sent again by the client itself only when sending
// it again cannot do harm.
//
// - draining: the sidecar refused the request before serving it, so
//   nothing was done, whatever the operation.
// - unavailable: the sidecar may have been half-way through it (a commit
//   whose answer was lost), so only a call a repeat cannot make do more is
//   sent again: those in IDEMPOTENT. pop, ack, renew, release,
//   transaction, seek, deleteGroup, dlqReplay, dlqDelete and maintenance
//   changes are not.
//
// Any other answer, and a lost connection, is the caller's to handle.

import { checkKeys } from './options.js';

/** The policy of a client connected without `retry`. */
export const DEFAULT_RETRY = Object.freeze({ initialDelayMs: 50, maxDelayMs: 1000, maxElapsedMs: 5000 });

const always = () => true;

// A repeat of an item with a transaction id is answered duplicate; one the
// sidecar named itself would be stored twice.
const everyItemHasTransactionId = (args) =>
  (args?.items ?? []).every((item) => typeof item?.transactionId === 'string' && item.transactionId !== '');

// maintenance without arguments only reads the state.
const readsOnly = (args) => args === undefined || args === null || Object.keys(args).length === 0;

// The operations a repeat cannot make do more, each with the condition on
// its (wire) arguments.
const IDEMPOTENT = Object.freeze({
  hello: always,
  health: always,
  configure: always, // it sets every option to what it is given
  queues: always,
  stats: always,
  groups: always,
  dlq: always,
  dlqSummary: always,
  push: everyItemHasTransactionId,
  maintenance: readsOnly,
});

/**
 * Whether a call of op with args, answered code, may be sent again.
 * @param {string} op
 * @param {Record<string, any> | undefined} args
 * @param {string} code
 */
export function mayRetry(op, args, code) {
  if (code === 'draining') return true;
  if (code === 'unavailable') return Object.hasOwn(IDEMPOTENT, op) && IDEMPOTENT[op](args);
  return false;
}

/**
 * The policy a connect option asks for: undefined or true for the
 * defaults, false for none, or an object whose missing fields default.
 * @returns {typeof DEFAULT_RETRY | null}
 */
export function retryPolicy(option) {
  if (option === false || option === null) return null;
  if (option === undefined || option === true) return DEFAULT_RETRY;
  checkKeys('connect retry', option, Object.keys(DEFAULT_RETRY));
  const policy = { ...DEFAULT_RETRY, ...option };
  for (const key of Object.keys(DEFAULT_RETRY)) {
    if (!(Number.isFinite(policy[key]) && policy[key] > 0)) throw new TypeError(`retry.${key} must be a positive number`);
  }
  return Object.freeze(policy);
}

/** The pauses between the attempts of one call, and its deadline. */
export class Backoff {
  #policy;
  #delay;

  /**
   * @param {typeof DEFAULT_RETRY} policy
   * @param {number | undefined} timeoutMs the call's, if any
   * @param {number} started Date.now() when the call began
   */
  constructor(policy, timeoutMs, started) {
    this.#policy = policy;
    this.#delay = policy.initialDelayMs;
    this.deadline = started + (timeoutMs ? timeoutMs : policy.maxElapsedMs);
  }

  /**
   * The pause before the next attempt, drawn between half and all of the
   * current delay (so that clients refused together do not come back
   * together); undefined when that attempt would start after the deadline.
   */
  nextPause() {
    const pause = this.#delay / 2 + Math.random() * (this.#delay / 2);
    this.#delay = Math.min(2 * this.#delay, this.#policy.maxDelayMs);
    return Date.now() + pause < this.deadline ? pause : undefined;
  }

  /** What is left of the deadline, in whole milliseconds (at least 1). */
  remainingMs() {
    return Math.max(1, Math.floor(this.deadline - Date.now()));
  }
}

/** Waits ms, or rejects with the signal's reason once it is aborted. */
export function pause(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
