// The options of consume() and messages(): their names, their defaults, and
// the failure backoff. The defaults are the Go and Python clients' too
// (clients/testdata/cases.json, consumeDefaults).
import { checkKeys } from './options.js';

export const CONSUME_DEFAULTS = Object.freeze({
  batch: 100,
  partitions: 100,
  concurrency: 1,
  waitMs: 5000,
  stopOnSignals: true,
  failureBackoff: Object.freeze({ initialMs: 1000, maxMs: 60_000 }),
});

const MESSAGES_OPTIONS = [
  'group', 'partition', 'batch', 'partitions', 'waitMs', 'leaseSeconds', 'renewEveryMs',
  'subscriptionMode', 'subscriptionFrom', 'signal', 'stopOnSignals',
];
// The most handler calls consume() runs at once (its concurrency): one a
// lease, and a pop leases at most 100 partitions, so a higher concurrency
// would never be used. The Go and Python clients have the same bound
// (clients/testdata/cases.json, concurrencyMax).
export const MAX_CONCURRENCY = 100;

const CONSUME_OPTIONS = [...MESSAGES_OPTIONS, 'concurrency', 'ackAsync', 'onAckError', 'failureBackoff', 'logger'];

/**
 * The options of messages(), checked, with their defaults.
 * @param {import('../index.js').MessagesOptions} [options]
 */
export function messagesOptions(options) {
  checkKeys('messages', options, MESSAGES_OPTIONS);
  return withDefaults(options ?? {});
}

/**
 * The options of consume(), checked, with their defaults.
 * @param {import('../index.js').ConsumeOptions} [options]
 */
export function consumeOptions(options) {
  checkKeys('consume', options, CONSUME_OPTIONS);
  const opts = withDefaults(options ?? {});
  const concurrency = opts.concurrency ?? CONSUME_DEFAULTS.concurrency;
  if (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > MAX_CONCURRENCY) {
    throw new TypeError(`consume: concurrency must be an integer from 1 to ${MAX_CONCURRENCY}`);
  }
  const logger = opts.logger ?? console;
  if (typeof logger?.warn !== 'function') throw new TypeError('consume: logger must be an object with a warn() method, such as console');
  return { ...opts, concurrency, logger, failureBackoff: failureBackoff(opts.failureBackoff) };
}

function withDefaults(options) {
  return {
    ...options,
    batch: options.batch ?? CONSUME_DEFAULTS.batch,
    partitions: options.partitions ?? CONSUME_DEFAULTS.partitions,
    waitMs: options.waitMs ?? CONSUME_DEFAULTS.waitMs,
    stopOnSignals: options.stopOnSignals ?? CONSUME_DEFAULTS.stopOnSignals,
  };
}

// {initialMs, maxMs}, a field left out keeping its default; false: none.
function failureBackoff(option) {
  if (option === false) return null;
  if (option === undefined || option === null || option === true) return CONSUME_DEFAULTS.failureBackoff;
  checkKeys('consume failureBackoff', option, Object.keys(CONSUME_DEFAULTS.failureBackoff));
  const backoff = { ...CONSUME_DEFAULTS.failureBackoff, ...option };
  for (const key of Object.keys(backoff)) {
    if (!(Number.isFinite(backoff[key]) && backoff[key] >= 0)) {
      throw new TypeError(`consume: failureBackoff.${key} must be a number of 0 or more (failureBackoff: false turns the backoff off)`);
    }
  }
  return Object.freeze(backoff);
}

/**
 * How long the loop holds a failed message before it acks the failure:
 * min(initialMs * 2^(failures-1), maxMs).
 * @param {number} failures how many times the message has failed, this time included
 * @param {{initialMs: number, maxMs: number} | null} backoff null: none
 */
export function failureDelayMs(failures, backoff) {
  if (backoff === null) return 0;
  return Math.min(backoff.initialMs * 2 ** (Math.max(1, failures) - 1), backoff.maxMs);
}
