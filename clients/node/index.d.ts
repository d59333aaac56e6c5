// Types of the queenside Node client. The sources are plain ESM JavaScript
// under src/ (which CommonJS loads with require() too, Node 20.19 or
// later); these declarations describe their public surface.

import { EventEmitter } from 'node:events';
import type { Code, CodeRow } from './src/codes.js';
import type { QueueOptions, QueueOptionRow } from './src/queue-options.js';

// Generated from the sidecar's own tables (go run ./protocol/internal/gen).
export type { Code, CodeRow, QueueOptions, QueueOptionRow };
export { CODES } from './src/codes.js';
export { DEFAULT_QUEUE_OPTIONS, QUEUE_OPTIONS } from './src/queue-options.js';

// ---------------------------------------------------------------- values

/** A Date that also keeps the nanoseconds of a msgpack timestamp. */
export declare class PreciseDate extends Date {
  constructor(seconds: number, nanoseconds: number);
  /** Whole seconds since the epoch. */
  readonly seconds: number;
  /** Nanoseconds within the second, 0..999999999. */
  readonly nanoseconds: number;
  /** RFC 3339 with nine fractional digits. */
  toPreciseISOString(): string;
  timeSpec(): { sec: number; nsec: number };
}

/** Bytes that are already one encoded msgpack value; encoded verbatim. */
export declare class RawMsgpack {
  constructor(bytes: Uint8Array);
  readonly bytes: Uint8Array;
}

/** Integers are numbers, or bigints where a number would not be exact. */
export type Integer = number | bigint;

/** A time argument: a Date, an RFC 3339 string, or epoch milliseconds. */
export type TimeArg = Date | string | number;

/** Options every call accepts next to its own. */
export interface CallOptions {
  /** Aborting rejects the call with the signal's reason; a late answer is discarded. */
  signal?: AbortSignal;
  /** Sent as the request's timeoutMs: the sidecar answers deadline_exceeded when it runs out. */
  timeoutMs?: number;
}

// ---------------------------------------------------------------- operations' shapes

export interface HelloResult {
  protocol: number;
  server: string;
  version: string;
  sidecarId: string;
  maxFrameBytes: number;
  [key: string]: unknown;
}

/**
 * An item of push (or of transaction's pushes). One without a queue, or
 * without a payload (null is a payload, undefined is none), is refused
 * before anything is sent: the call rejects with InvalidArgumentError
 * ("push item 2: payload is required"). A key not named here is refused
 * with a TypeError.
 */
export interface PushItem {
  queue: string;
  /** Default "Default". */
  partition?: string;
  /** Any value msgpack can hold; null is a real payload. Required unless payloadBytes is given. */
  payload?: unknown;
  /** An already-encoded msgpack value, sent byte for byte (instead of payload). */
  payloadBytes?: Uint8Array;
  /** The deduplication key; give one so that a retry is stored once. */
  transactionId?: string;
  traceId?: string;
  headers?: Record<string, string> | Map<string, string>;
}

export interface WireError {
  code: string;
  message: string;
  retryable: boolean;
  details?: Record<string, unknown>;
}

export interface PushResult {
  index: number;
  status: 'queued' | 'duplicate' | 'buffered' | 'failed';
  queue: string;
  partition: string;
  transactionId: string;
  messageId?: string;
  offset?: Integer;
  committedAt?: PreciseDate;
  error?: WireError;
  [key: string]: unknown;
}

export interface PopOptions extends CallOptions {
  partition?: string;
  /** Omitted or "" is queue mode: one shared group per queue. */
  group?: string;
  /** 1..10000, default 1. */
  batch?: number;
  /** 1..100, default 1. */
  partitions?: number;
  /** Long-poll time, 0..60000, default 0. */
  waitMs?: number;
  autoAck?: boolean;
  leaseSeconds?: number;
  subscriptionMode?: 'all' | 'new' | 'from';
  subscriptionFrom?: TimeArg;
}

export interface Message {
  queue: string;
  partition: string;
  offset: Integer;
  messageId: string;
  transactionId: string;
  /** The decoded payload (undefined only if its bytes have no JS value). */
  payload: unknown;
  /** The exact bytes the payload was pushed with. */
  payloadBytes: Uint8Array;
  committedAt: PreciseDate;
  traceId?: string;
  headers?: Record<string, string>;
  /** Absent with autoAck. */
  leaseId?: string;
  redelivered: boolean;
  /** The PostgreSQL role that pushed it, stamped by PostgreSQL, never by a client; absent for messages stored before it was kept. */
  producer?: string;
  /** Its ack item completing it, as completed(msg); not enumerable. Throws without a lease (autoAck). */
  completed(): AckItem;
  /** Its ack item failing it, as failed(msg, reason); not enumerable. */
  failed(reason?: unknown): AckItem;
  [key: string]: unknown;
}

export interface Lease {
  leaseId: string;
  queue: string;
  partition: string;
  group: string;
  fromOffset: Integer;
  toOffset: Integer;
  expiresAt: PreciseDate;
  headAttempts: number;
  [key: string]: unknown;
}

export interface PopResult {
  messages: Message[];
  leases: Lease[];
}

export interface AckItem {
  leaseId: string;
  /** Give offset or transactionId, not both. */
  offset?: Integer;
  transactionId?: string;
  /** Default "completed". */
  status?: 'completed' | 'failed';
  error?: string;
}

/** What ack and transaction take: ack items, or messages as pop returned them (acked completed). */
export type AckLike = AckItem | Message;

export interface AckItemResult {
  index: number;
  success: boolean;
  /** Why it did not succeed; ACK_ITEM_CODES gives each in words. */
  code?: AckItemCode | string;
  deadLettered?: boolean;
}

/** The per-item codes of ack, renew and release (already_acked: revision 1.2). */
export type AckItemCode = 'already_acked' | 'lease_expired' | 'not_in_lease' | 'unresolvable' | 'rewound' | 'unavailable';

/** Each per-item code and what it means in words ("already acknowledged"), as error messages and logs say it. */
export declare const ACK_ITEM_CODES: Readonly<Record<AckItemCode, string>>;

export interface AckLeaseResult {
  leaseId: string;
  released: boolean;
  cursor: Integer;
}

export interface AckResult {
  results: AckItemResult[];
  leases: AckLeaseResult[];
}

/** What ackAndPop resolves with: the acks' results and the pop's. */
export interface AckAndPopResult extends AckResult {
  /** The pop's result; empty when popError is set. */
  pop: PopResult;
  /** Why the pop failed once the acks were applied (overloaded, say). */
  popError?: QueensideError;
}

export interface LeaseResult {
  leaseId: string;
  success: boolean;
  expiresAt?: PreciseDate;
  code?: string;
}

export interface TransactionResult {
  acks: AckItemResult[];
  pushes: PushResult[];
}

export interface ConfigureResult {
  queue: string;
  options: Required<QueueOptions>;
}

export interface QueueInfo {
  queue: string;
  partitions: number;
  options: Required<QueueOptions>;
}

export interface StatsResult {
  queue: string;
  partitions: Array<{
    partition: string;
    headOffset: Integer;
    messages: Integer;
    groups: Array<{ group: string; cursor: Integer; lag: Integer; leased: boolean }>;
  }>;
}

export interface GroupInfo {
  queue: string;
  group: string;
  lag: Integer;
  leasedPartitions: number;
  oldestUnackedAt?: PreciseDate;
}

export interface CursorPosition {
  partition: string;
  cursor: Integer;
}

export interface DlqOptions extends CallOptions {
  group?: string;
  partition?: string;
  /** 1..1000, default 100. */
  limit?: number;
  /** The nextAfterId of the previous page. */
  afterId?: Integer;
  /** Revision 1.2: a substring of the error, case-sensitive. */
  errorContains?: string;
  /** Revision 1.2: dead at or after. */
  deadFrom?: Date;
  /** Revision 1.2: dead before. */
  deadTo?: Date;
  /** Revision 1.2: also count what the filter matches (count, replayedCount). */
  count?: boolean;
}

/** Which dead letters a bulk action takes (revision 1.2); queue is required. */
export interface DlqFilter {
  queue: string;
  group?: string;
  partition?: string;
  errorContains?: string;
  deadFrom?: Date;
  deadTo?: Date;
}

/** Dead letters named by ids, or one batch of a filter. */
export type DlqSelection = { ids: Integer[] } | (DlqFilter & { afterId?: Integer; limit?: number });

export interface DlqReplayReply {
  results: DlqReplayResult[];
  replayed: number;
  skipped: number;
  failed: number;
  nextAfterId?: Integer;
}

export interface DlqDeleteReply {
  deleted: number;
  nextAfterId?: Integer;
}

export interface DlqErrorCount {
  queue: string;
  group: string;
  error: string;
  count: Integer;
  replayed: Integer;
  firstDeadAt: PreciseDate;
  lastDeadAt: PreciseDate;
}

export interface DlqEntry {
  id: Integer;
  queue: string;
  partition: string;
  group: string;
  offset: Integer;
  messageId: string;
  transactionId: string;
  payload: unknown;
  payloadBytes: Uint8Array;
  error: string;
  failures: number;
  committedAt: PreciseDate;
  deadAt: PreciseDate;
  replayedAt?: PreciseDate;
  replayedMessageId?: string;
  replayedTransactionId?: string;
  replayedOffset?: Integer;
  /** The PostgreSQL role that pushed the message. */
  producer?: string;
  [key: string]: unknown;
}

export interface DlqResult {
  entries: DlqEntry[];
  nextAfterId?: Integer;
  count?: Integer;
  replayedCount?: Integer;
}

export interface DlqReplayResult {
  id: Integer;
  status: 'queued' | 'duplicate' | 'failed' | 'skipped' | string;
  messageId?: string;
  transactionId?: string;
  offset?: Integer;
  committedAt?: PreciseDate;
  error?: WireError;
}

export interface HealthResult {
  status: 'ok' | 'unavailable' | 'draining';
  database: { ok: boolean; latencyMs?: number; error?: string };
  spool: { records: number; bytes: number; oldestAt?: PreciseDate; replaying: boolean; warnings?: string[] };
  version: string;
  uptimeSeconds: number;
  [key: string]: unknown;
}

// ---------------------------------------------------------------- consumption

/** Options of consume() and messages(); a name not listed here is refused with a TypeError. */
export interface ConsumerOptions {
  group?: string;
  partition?: string;
  /** Messages per pop, default 10. */
  batch?: number;
  /** Partitions per pop, default 1. */
  partitions?: number;
  /** Long-poll time per pop, default 5000. A stop does not wait for it. */
  waitMs?: number;
  /** Lease time asked for on pop and renew; default the queue's. */
  leaseSeconds?: number;
  subscriptionMode?: 'all' | 'new' | 'from';
  subscriptionFrom?: TimeArg;
  /** How often leases are renewed while messages are handled; default a third of the lease time. */
  renewEveryMs?: number;
  /** Stops the loop: the messages in hand are finished, the rest released. */
  signal?: AbortSignal;
  /**
   * Stop as `signal` does on SIGINT and SIGTERM (true, the default), on the
   * signals listed, or on none (false). The first signal stops the loops;
   * the process's own handling of it is back at once.
   */
  stopOnSignals?: boolean | NodeJS.Signals[];
}

export type MessagesOptions = ConsumerOptions;

export interface ConsumeOptions extends ConsumerOptions {
  /**
   * How many handler calls run at once, from 1 (the default) to 100. One
   * loop pops; the pop's messages are grouped by partition (one lease
   * each), and up to this many partitions are handled at once, each
   * partition's messages one after another, in offset order, never two at
   * once in one partition. The pop's acks go once all its partitions are
   * done. With 1, messages are handled one at a time, in the order the pop
   * returned them.
   */
  concurrency?: number;
  /**
   * Send the acks of batches whose messages all completed in the background,
   * while the next pop is in flight; at most one ack call is in flight and
   * what completes meanwhile is merged into the next. A batch with a failure
   * or a release is settled on its own before the next pop. Default false:
   * each batch's acks are carried by the next pop (ackAndPop), and a batch
   * cut short by a stop is settled on its own.
   */
  ackAsync?: boolean;
  /**
   * With ackAsync, receives each failed ack (refused items, or a call that
   * failed): those messages will be delivered again. Without it, a failed
   * ack ends consume(), which rejects with the AckError.
   */
  onAckError?: (error: AckError) => void;
  /**
   * How long a failed message is held, its lease renewed, before its
   * failure is acked (and it comes again): min(initialMs * 2^(n-1), maxMs)
   * after its n-th failure. A field left out keeps its default
   * ({initialMs: 1000, maxMs: 60000}); false acks failures at once.
   */
  failureBackoff?: { initialMs?: number; maxMs?: number } | false;
  /** Where handler failures and refused acks are logged, one line each; default console. */
  logger?: { warn(line: string): unknown };
}

/**
 * Ack items that did not succeed (consume() with ackAsync): the cursor did
 * not move for them. Its message says what happened to each, in words:
 * "ack item 0: lease expired (lease_expired)".
 */
export declare class AckError extends Error {
  /** The ack items that did not succeed. */
  readonly items: AckItem[];
  /** Per item, the sidecar's code (lease_expired, not_in_lease...); undefined when the call itself failed (see cause). */
  readonly codes?: string[];
}

/** A message from client.messages(), which can be settled explicitly. */
export interface ConsumedMessage extends Message {
  leaseId: string;
  /** Count it completed now (for instance before `break`). */
  complete(): void;
  /** Count it failed now: it and the rest of its lease come again. */
  fail(reason?: unknown): void;
  /**
   * With OpenTelemetry: the `@opentelemetry/api` Context in which this
   * message's consumer span is active, for `context.with(msg.traceContext, ...)`.
   * Undefined when `@opentelemetry/api` is not installed. Not enumerable.
   */
  readonly traceContext?: unknown;
}

export interface ConsumeTotals {
  /** Messages whose handler returned (each time it did). */
  completed: number;
  /** Messages whose handler failed (each time it did). */
  failed: number;
}

export type Handler = (message: Message & { leaseId: string }, context: { signal: AbortSignal }) => unknown;

export declare class MessageIterator implements AsyncIterableIterator<ConsumedMessage> {
  [Symbol.asyncIterator](): this;
  next(): Promise<IteratorResult<ConsumedMessage, undefined>>;
  return(): Promise<IteratorResult<ConsumedMessage, undefined>>;
  /** The messages completed and failed so far. */
  readonly totals: ConsumeTotals;
}

// ---------------------------------------------------------------- client

export interface ConnectOptions {
  /** Socket path; default defaultSocketPath(). */
  socket?: string;
  /** Aborts connecting. */
  signal?: AbortSignal;
  /** Sent in hello; default "queenside-node/<version>". */
  client?: string;
  /** Say hello on connect (learns maxFrameBytes); default true. */
  hello?: boolean;
  timeoutMs?: number;
  /**
   * How calls answered unavailable or draining are sent again where that
   * cannot do harm (README, "Retries"): fields left out take DEFAULT_RETRY's;
   * false turns retries off.
   */
  retry?: Partial<RetryPolicy> | boolean;
}

export interface RetryPolicy {
  /** The first pause; each doubles it up to maxDelayMs. Default 50. */
  initialDelayMs: number;
  /** Default 1000. */
  maxDelayMs: number;
  /** How long a call without timeoutMs is retried; one with it, until it runs out. Default 5000. */
  maxElapsedMs: number;
}

export declare const DEFAULT_RETRY: Readonly<RetryPolicy>;

export interface RawCallOptions extends CallOptions {
  /** Receives the result of a call answered after it was aborted or timed out. */
  onLateResult?: (result: any) => void;
}

export declare class Client extends EventEmitter {
  /** Use Client.connect() or connect(). */
  private constructor();
  static connect(options?: ConnectOptions | string): Promise<Client>;

  /** The path connected to. */
  readonly socketPath: string;
  /** What the sidecar said in the last hello. */
  server: HelloResult | undefined;
  /** The sidecar's frame limit, once known; larger requests fail locally with FrameTooLargeError. */
  maxFrameBytes: number | undefined;
  /** True once the sidecar announced that it is shutting down; calls but health then fail with DrainingError. */
  readonly draining: boolean;
  /** True once the connection has ended. */
  readonly closed: boolean;
  /** Calls waiting for an answer. */
  readonly inFlight: number;

  /** Sends any operation; resolves with its result map. */
  call(op: string, args?: Record<string, unknown>, options?: RawCallOptions): Promise<any>;
  /** Closes the connection; calls in flight fail with ConnectionError. */
  close(): Promise<void>;

  hello(options?: CallOptions & { client?: string; protocol?: number }): Promise<HelloResult>;
  push(items: PushItem | PushItem[], options?: CallOptions): Promise<PushResult[]>;
  pop(queue: string, options?: PopOptions): Promise<PopResult>;
  /** Items are ack items, or messages as pop returned them (acked completed): `ack(res.messages)`. */
  ack(items: AckLike | AckLike[], options?: CallOptions): Promise<AckResult>;
  /**
   * Acks items (as ack takes them) and pops queue (options as pop takes
   * them) in one request and one transaction (revision 1.2); a sidecar of
   * revision 1.1 is sent the pop on its own.
   */
  ackAndPop(items: AckLike | AckLike[], queue: string, options?: PopOptions): Promise<AckAndPopResult>;
  renew(leaseIds: string | string[], options?: CallOptions & { seconds?: number }): Promise<LeaseResult[]>;
  release(leaseIds: string | string[], options?: CallOptions): Promise<LeaseResult[]>;
  /** All or nothing; rejects with ConflictError (ack results in .acks) when an ack item cannot succeed. */
  transaction(items: { acks?: AckLike[]; pushes?: PushItem[] }, options?: CallOptions): Promise<TransactionResult>;
  /** Replaces every option of the queue: one left out goes back to its default. */
  configure(queue: string, options?: QueueOptions & CallOptions): Promise<ConfigureResult>;
  queues(options?: CallOptions): Promise<QueueInfo[]>;
  stats(queue: string, options?: CallOptions): Promise<StatsResult>;
  groups(queue?: string, options?: CallOptions): Promise<GroupInfo[]>;
  groups(options: CallOptions): Promise<GroupInfo[]>;
  seek(queue: string, group: string, to: 'beginning' | 'end' | TimeArg, options?: CallOptions & { partition?: string }): Promise<CursorPosition[]>;
  deleteGroup(queue: string, group: string, options?: CallOptions): Promise<boolean>;
  dlq(queue: string, options?: DlqOptions): Promise<DlqResult>;
  dlqReplay(ids: Integer | Integer[], options?: CallOptions): Promise<DlqReplayResult[]>;
  dlqReplayBatch(selection: DlqSelection & { includeReplayed?: boolean }, options?: CallOptions): Promise<DlqReplayReply>;
  dlqReplayAll(filter: DlqFilter, options?: CallOptions & { includeReplayed?: boolean; onProgress?: (batch: DlqReplayReply) => void }):
    Promise<{ replayed: number; skipped: number; failed: number }>;
  dlqDelete(selection: DlqSelection, options?: CallOptions): Promise<DlqDeleteReply>;
  dlqDeleteAll(filter: DlqFilter, options?: CallOptions): Promise<number>;
  dlqSummary(queue?: string, options?: CallOptions & { limit?: number }): Promise<DlqErrorCount[]>;
  health(options?: CallOptions): Promise<HealthResult>;

  /** Consumption as an async iterator; see the README for when a message counts as done. */
  messages(queue: string, options?: MessagesOptions): MessageIterator;
  /**
   * Runs handler over the queue's messages until stopped (signal, or
   * SIGINT/SIGTERM); resolves after a clean stop. Rejects at once with a
   * TypeError when handler is not a function.
   */
  consume(queue: string, handler: Handler, options?: ConsumeOptions): Promise<ConsumeTotals>;

  on(event: 'draining', listener: () => void): this;
  on(event: 'close', listener: (error: QueensideError | undefined) => void): this;
  on(event: 'notice', listener: (notice: unknown) => void): this;
  on(event: 'unmatchedError', listener: (error: QueensideError) => void): this;
  on(event: string | symbol, listener: (...args: any[]) => void): this;
}

export declare function connect(options?: ConnectOptions | string): Promise<Client>;

export declare const CLIENT_NAME: string;
export declare const PROTOCOL_VERSION: 1;
export declare const DEFAULT_SOCKET: string;
export declare const DEV_SOCKET: string;
/** QUEENSIDE_SOCKET, else ./.queenside/queenside.sock if it exists, else DEFAULT_SOCKET. */
export declare function defaultSocketPath(): string;

/** An ack item completing a popped message. */
export declare function completed(message: { leaseId?: string; offset: Integer }): AckItem;
/** An ack item failing a popped message (charged to its retry budget). */
export declare function failed(message: { leaseId?: string; offset: Integer }, reason?: unknown): AckItem;

// ---------------------------------------------------------------- inside your own transaction

/**
 * What pushTx and ackTx run their statements on: anything with
 * node-postgres's `query(text, values)` resolving with `{rows}`, such as a
 * `pg.Client` or a `PoolClient` inside BEGIN. `pg` is the app's own
 * dependency, not this package's.
 */
export interface PgQueryable {
  query(text: string, values?: unknown[]): Promise<{ rows: any[] }>;
}

/** A push result of pushTx: queued, or duplicate with the original's offset and message id. */
export interface PushTxResult extends PushResult {
  status: 'queued' | 'duplicate';
  messageId: string;
  offset: Integer;
}

/**
 * Pushes items (as push takes them) in the transaction pgClient is in, one
 * `queenside.send_batch` statement a queue: the messages commit or roll back
 * with the app's own writes (the outbox). Never begins or commits. Payloads
 * are encoded as push encodes them; headers go as a JSON object. Rejects
 * with InvalidArgumentError, UnavailableError or UnsupportedError (the
 * PostgreSQL error as `cause`) when queenside refuses an item; other
 * database errors propagate as they are.
 */
export declare function pushTx(pgClient: PgQueryable, items: PushItem | PushItem[]): Promise<PushTxResult[]>;

/**
 * Acks items (as ack takes them: popped messages are acked completed) in
 * the transaction pgClient is in, one `queenside.ack_message` statement per
 * item: the acks commit or roll back with the consumer's own writes (the
 * inbox). Never begins or commits. An item that does not succeed is not
 * thrown: its result's code says why (roll back then); `leases` is empty.
 */
export declare function ackTx(pgClient: PgQueryable, items: AckLike | AckLike[]): Promise<AckResult>;

/**
 * A transaction id from the parts that identify an item: each part as bytes
 * (a string as UTF-8, an integer in decimal, bytes as they are), prefixed
 * with its length as 4 big-endian bytes, hashed with SHA-256; the first 32
 * hex digits. The same as Go's TransactionID and Python's transaction_id.
 * Throws a TypeError for no parts, or a part of another type (a boolean,
 * a number that is not a safe integer, null...).
 */
export declare function transactionId(...parts: Array<string | number | bigint | Uint8Array>): string;

// ---------------------------------------------------------------- codec

export declare function encode(value: unknown): Uint8Array;
export declare function decode(bytes: Uint8Array): unknown;
/** Decodes a frame body; payloads stay RawMsgpack. */
export declare function decodeEnvelope(body: Uint8Array): Record<string, any>;
/** Encodes an envelope as a whole frame, length prefix included. */
export declare function encodeEnvelope(envelope: Record<string, any>): Uint8Array;
export declare class FrameReader {
  push(chunk: Uint8Array): Uint8Array[];
  readonly buffered: number;
}

// ---------------------------------------------------------------- errors

/** Every code, by itself: Codes.unavailable is 'unavailable'. */
export declare const Codes: Readonly<{ [C in Code]: C }>;
/** The error class of each code. */
export declare const ERROR_CLASSES: Readonly<Record<Code, typeof QueensideError>>;

export declare class QueensideError extends Error {
  constructor(message: string, fields: { code: string; retryable?: boolean; details?: Record<string, unknown>; op?: string; cause?: unknown });
  /** The protocol code, e.g. "invalid_argument" ("connection" for ConnectionError). */
  readonly code: string;
  readonly retryable: boolean;
  readonly details: Record<string, unknown> | undefined;
  /** The operation of the failed call. */
  readonly op: string | undefined;
}
export declare class BadRequestError extends QueensideError {}
export declare class FrameTooLargeError extends QueensideError {}
export declare class UnknownOpError extends QueensideError {}
export declare class UnsupportedError extends QueensideError {}
export declare class InvalidArgumentError extends QueensideError {}
export declare class NotFoundError extends QueensideError {}
export declare class ConflictError extends QueensideError {
  /** The per-item ack results of the refused transaction. */
  readonly acks: AckItemResult[];
}
export declare class LeaseExpiredError extends QueensideError {}
export declare class UnavailableError extends QueensideError {}
export declare class SpoolFullError extends QueensideError {}
export declare class DrainingError extends QueensideError {}
export declare class OverloadedError extends QueensideError {}
export declare class DeadlineExceededError extends QueensideError {}
export declare class UnauthorizedError extends QueensideError {}
export declare class KeyMissingError extends QueensideError {}
export declare class PermissionDeniedError extends QueensideError {}
export declare class ForbiddenError extends QueensideError {}
export declare class InternalError extends QueensideError {}
/** The connection ended; the call may or may not have been carried out. */
export declare class ConnectionError extends QueensideError {
  constructor(message: string, fields?: { cause?: unknown; op?: string });
}
