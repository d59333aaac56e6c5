// Errors answered by the sidecar, one class per protocol code (PROTOCOL.md,
// section 5), and the client's own ConnectionError. Programs branch on the
// class or on `.code`; `.message` is text for people.
import { CODES } from './codes.js';

/** Every error this client raises for a call, except an abort. */
export class QueensideError extends Error {
  /**
   * @param {string} message
   * @param {{code: string, retryable?: boolean, details?: Record<string, unknown>, op?: string, cause?: unknown}} fields
   */
  constructor(message, { code, retryable = false, details, op, cause } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = new.target.name;
    /** The stable protocol code, e.g. "invalid_argument". */
    this.code = code;
    /** Whether the same request may succeed if sent again later or elsewhere. */
    this.retryable = retryable;
    /** Extra facts from the sidecar, when it sent any. */
    this.details = details;
    /** The operation of the failed call. */
    this.op = op;
  }
}

// One class per code of the generated table (codes.js, written from
// protocol/codes.go). Retryable follows that table but is always taken from
// the error object when the sidecar sent one. A class that does more than
// carry its code is written here; every other one is made from its row.
class ConflictError extends QueensideError {
  /** The per-item ack results of the transaction that was refused. */
  get acks() {
    return this.details?.acks ?? [];
  }
}
const WRITTEN = { conflict: ConflictError };

function plainClass(className) {
  // The computed key names the class, which the constructor copies to .name.
  return { [className]: class extends QueensideError {} }[className];
}

/** The class of each code, by code. */
export const ERROR_CLASSES = Object.freeze(Object.fromEntries(
  CODES.map(({ code, className }) => [code, WRITTEN[code] ?? plainClass(className)]),
));

// ES modules cannot export computed names: each class is listed here, and
// index.js exports them; errors.test.js fails if a row of the table is
// missing from the package's exports.
export const BadRequestError = ERROR_CLASSES.bad_request;
export const FrameTooLargeError = ERROR_CLASSES.frame_too_large;
export const UnknownOpError = ERROR_CLASSES.unknown_op;
export const UnsupportedError = ERROR_CLASSES.unsupported;
export const InvalidArgumentError = ERROR_CLASSES.invalid_argument;
export const NotFoundError = ERROR_CLASSES.not_found;
export { ConflictError };
export const LeaseExpiredError = ERROR_CLASSES.lease_expired;
export const UnavailableError = ERROR_CLASSES.unavailable;
export const SpoolFullError = ERROR_CLASSES.spool_full;
export const DrainingError = ERROR_CLASSES.draining;
export const OverloadedError = ERROR_CLASSES.overloaded;
export const DeadlineExceededError = ERROR_CLASSES.deadline_exceeded;
export const UnauthorizedError = ERROR_CLASSES.unauthorized;
export const InternalError = ERROR_CLASSES.internal;
export const KeyMissingError = ERROR_CLASSES.key_missing;
export const PermissionDeniedError = ERROR_CLASSES.permission_denied;
export const ForbiddenError = ERROR_CLASSES.forbidden;

/**
 * The connection is gone (closed by close(), by the sidecar, or broken).
 * A call that fails this way may or may not have been carried out; send it
 * again on a new client, with transaction ids on push items so that a
 * repeat is recognised as a duplicate.
 */
export class ConnectionError extends QueensideError {
  constructor(message, { cause, op } = {}) {
    super(message, { code: 'connection', retryable: true, cause, op });
  }
}

/** The codes of protocol version 1, by themselves: Codes.unavailable is 'unavailable'. */
export const Codes = Object.freeze(Object.fromEntries(CODES.map(({ code }) => [code, code])));

const RETRYABLE_CODES = new Set(CODES.filter((c) => c.retryable).map((c) => c.code));

/**
 * Builds the error for an error object of the protocol.
 * @param {{code?: unknown, message?: unknown, retryable?: unknown, details?: unknown}} wire
 * @param {string} [op]
 * @returns {QueensideError}
 */
export function errorFromWire(wire, op) {
  const code = typeof wire?.code === 'string' ? wire.code : 'internal';
  const text = typeof wire?.message === 'string' ? wire.message : code;
  // A code this client does not know yet keeps its own code and trusts the
  // flag it came with (PROTOCOL.md, section 8).
  const retryable = typeof wire?.retryable === 'boolean' ? wire.retryable : RETRYABLE_CODES.has(code);
  const details = wire?.details !== null && typeof wire?.details === 'object' ? wire.details : undefined;
  const ErrorClass = Object.hasOwn(ERROR_CLASSES, code) ? ERROR_CLASSES[code] : QueensideError;
  return new ErrorClass(op ? `${op}: ${text}` : text, { code, retryable, details, op });
}

/** An error made by the client itself for a protocol code (no round trip). */
export function localError(code, message, op) {
  return errorFromWire({ code, message, retryable: RETRYABLE_CODES.has(code) }, op);
}
