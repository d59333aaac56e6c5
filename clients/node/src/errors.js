// Errors answered by the sidecar, one class per protocol code (PROTOCOL.md,
// section 5), and the client's own ConnectionError. Programs branch on the
// class or on `.code`; `.message` is text for people.

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

// Each class fixes its code; retryable follows the protocol's table but is
// always taken from the error object when the sidecar sent one.
const CLASSES = {
  bad_request: class BadRequestError extends QueensideError {},
  frame_too_large: class FrameTooLargeError extends QueensideError {},
  unknown_op: class UnknownOpError extends QueensideError {},
  unsupported: class UnsupportedError extends QueensideError {},
  invalid_argument: class InvalidArgumentError extends QueensideError {},
  not_found: class NotFoundError extends QueensideError {},
  conflict: class ConflictError extends QueensideError {
    /** The per-item ack results of the transaction that was refused. */
    get acks() {
      return this.details?.acks ?? [];
    }
  },
  lease_expired: class LeaseExpiredError extends QueensideError {},
  unavailable: class UnavailableError extends QueensideError {},
  spool_full: class SpoolFullError extends QueensideError {},
  draining: class DrainingError extends QueensideError {},
  overloaded: class OverloadedError extends QueensideError {},
  deadline_exceeded: class DeadlineExceededError extends QueensideError {},
  unauthorized: class UnauthorizedError extends QueensideError {},
  internal: class InternalError extends QueensideError {},
  key_missing: class KeyMissingError extends QueensideError {},
};

export const BadRequestError = CLASSES.bad_request;
export const FrameTooLargeError = CLASSES.frame_too_large;
export const UnknownOpError = CLASSES.unknown_op;
export const UnsupportedError = CLASSES.unsupported;
export const InvalidArgumentError = CLASSES.invalid_argument;
export const NotFoundError = CLASSES.not_found;
export const ConflictError = CLASSES.conflict;
export const LeaseExpiredError = CLASSES.lease_expired;
export const UnavailableError = CLASSES.unavailable;
export const SpoolFullError = CLASSES.spool_full;
export const DrainingError = CLASSES.draining;
export const OverloadedError = CLASSES.overloaded;
export const DeadlineExceededError = CLASSES.deadline_exceeded;
export const UnauthorizedError = CLASSES.unauthorized;
export const InternalError = CLASSES.internal;
export const KeyMissingError = CLASSES.key_missing;

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

/** The codes of protocol version 1. */
export const Codes = Object.freeze(Object.fromEntries(Object.keys(CLASSES).map((c) => [c, c])));

const RETRYABLE_CODES = new Set(['unavailable', 'spool_full', 'draining', 'overloaded', 'deadline_exceeded', 'internal']);

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
  const ErrorClass = Object.hasOwn(CLASSES, code) ? CLASSES[code] : QueensideError;
  return new ErrorClass(op ? `${op}: ${text}` : text, { code, retryable, details, op });
}

/** An error made by the client itself for a protocol code (no round trip). */
export function localError(code, message, op) {
  return errorFromWire({ code, message, retryable: RETRYABLE_CODES.has(code) }, op);
}
