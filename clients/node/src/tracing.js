// OpenTelemetry context propagation, when the app has @opentelemetry/api.
//
// - Every push item sent while a span is active carries that span's W3C
//   context (traceparent, and tracestate when there is one) in its headers,
//   written by the app's registered propagator. A traceparent the app put
//   there itself is kept as it is.
// - The consume loops handle each message inside a CONSUMER span named
//   "process <queue>", whose parent is the context found in the message's
//   headers and which links to it.
//
// @opentelemetry/api is an optional peer dependency. It is looked for once,
// on first use; without it every function here returns at once and items
// and messages go through untouched. With it but without a registered SDK,
// its no-op implementation makes this cost next to nothing, and inject
// nothing.
import { createRequire } from 'node:module';
import { VERSION } from './version.js';

const TRACEPARENT = 'traceparent';
// The sidecar refuses an item with more headers than this; an item that
// would pass it goes without trace context rather than fail.
const MAX_HEADERS = 64;

// undefined until the first use, then the API or null (not installed).
let api;
let tracer;

/** The @opentelemetry/api module, or null when the app does not have it. */
export function otelApi() {
  if (api === undefined) {
    try {
      // Synchronous, so that a push never waits for it; the API keeps its
      // registrations on globalThis, so this CommonJS copy sees what the
      // app registered through an ESM import.
      api = createRequire(import.meta.url)('@opentelemetry/api');
    } catch {
      api = null;
    }
  }
  return api;
}

/**
 * items, with the current trace context added to each one's headers. Items
 * are copied, never changed: the app may push the same object again from
 * another span. Without OpenTelemetry, or outside any span, items is
 * returned as it is.
 * @param {any[]} items
 */
export function withTraceContext(items) {
  const otel = otelApi();
  if (otel === null) return items;
  const active = otel.context.active();
  const span = otel.trace.getSpan(active);
  if (span === undefined || !otel.trace.isSpanContextValid(span.spanContext())) return items;
  const carrier = {};
  otel.propagation.inject(active, carrier);
  if (Object.keys(carrier).length === 0) return items;
  return items.map((item) => withHeaders(item, carrier));
}

function withHeaders(item, carrier) {
  if (item === null || typeof item !== 'object') return item; // wirePushItem says what is wrong
  const own = item.headers;
  if (own instanceof Map) {
    // The app's own traceparent says where the message belongs; the
    // tracestate that came with it must not be mixed with ours either.
    if ([...own.keys()].some(isTraceparent)) return item;
    const headers = new Map(own);
    for (const [key, value] of Object.entries(carrier)) if (!headers.has(key)) headers.set(key, value);
    return headers.size > MAX_HEADERS ? item : { ...item, headers };
  }
  if (own != null && Object.keys(own).some(isTraceparent)) return item;
  const headers = { ...own };
  for (const [key, value] of Object.entries(carrier)) if (!Object.hasOwn(headers, key)) headers[key] = value;
  return Object.keys(headers).length > MAX_HEADERS ? item : { ...item, headers };
}

function isTraceparent(key) {
  return typeof key === 'string' && key.toLowerCase() === TRACEPARENT;
}

/**
 * The span of one consumed message, or undefined without OpenTelemetry.
 * Its parent is the context in the message's headers (or, for a message
 * pushed outside any trace, the context the loop runs in).
 * @param {any} message as popped
 * @param {string} [group]
 */
export function startConsumerSpan(message, group) {
  const otel = otelApi();
  if (otel === null) return undefined;
  tracer ??= otel.trace.getTracer('queenside', VERSION);
  let parent = otel.context.active();
  let links = [];
  if (message.headers) {
    // An extracted context is remote; one that is not was already there.
    const extracted = otel.propagation.extract(parent, message.headers);
    const producer = otel.trace.getSpan(extracted)?.spanContext();
    if (producer?.isRemote && otel.trace.isSpanContextValid(producer)) {
      parent = extracted;
      links = [{ context: producer }];
    }
  }
  const span = tracer.startSpan(`process ${message.queue}`, {
    kind: otel.SpanKind.CONSUMER,
    attributes: consumerAttributes(message, group),
    links,
  }, parent);
  return new ConsumerSpan(otel, span, otel.trace.setSpan(parent, span));
}

// The names of OpenTelemetry's messaging conventions, and those of
// queenside's other clients for what they do not cover.
function consumerAttributes(message, group) {
  const attributes = {
    'messaging.system': 'queenside',
    'messaging.operation.type': 'process',
    'messaging.operation.name': 'process',
    'messaging.destination.name': message.queue,
    'messaging.destination.partition.id': message.partition,
    'messaging.message.id': message.messageId,
    'queenside.transaction_id': message.transactionId,
    // Attribute values cannot be bigints; an offset past 2^53 goes as text.
    'queenside.offset': typeof message.offset === 'bigint' ? String(message.offset) : message.offset,
    'queenside.redelivered': message.redelivered,
  };
  if (group) attributes['messaging.consumer.group.name'] = group;
  return attributes;
}

class ConsumerSpan {
  #otel;
  #span;

  constructor(otel, span, context) {
    this.#otel = otel;
    this.#span = span;
    /** The context with this span active, for the app's own spans. */
    this.context = context;
  }

  /** Runs fn with this span active; records what it throws; ends the span. */
  async run(fn) {
    return this.#otel.context.with(this.context, async () => {
      try {
        return await fn();
      } catch (err) {
        this.fail(err);
        throw err;
      } finally {
        this.end();
      }
    });
  }

  /** Marks the span failed, with the exception (or reason) recorded. */
  fail(reason) {
    const error = reason instanceof Error ? reason : String(reason ?? 'failed');
    this.#span.recordException(error);
    this.#span.setStatus({
      code: this.#otel.SpanStatusCode.ERROR,
      message: error instanceof Error ? `${error.name}: ${error.message}` : error,
    });
  }

  end() {
    this.#span.end();
  }
}

/**
 * Calls fn inside the span of message (see startConsumerSpan); without
 * OpenTelemetry, just calls fn.
 */
export function runInConsumerSpan(message, group, fn) {
  const span = startConsumerSpan(message, group);
  return span === undefined ? fn() : span.run(fn);
}
