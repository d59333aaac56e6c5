// OpenTelemetry context propagation: traceparent on push, a consumer span
// per message in consume() and messages(). The node:test runner gives
// every test file a process of its own, so the SDK registered here is seen
// by no other file.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { after, before, describe, test } from 'node:test';
import { context, propagation, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { connect, pushTx } from '../src/index.js';
import { otelApi } from '../src/tracing.js';
import { testSidecars, uniqueQueue } from './harness.js';

const run = promisify(execFile);
const PACKAGE_DIR = fileURLToPath(new URL('..', import.meta.url));
const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;
const FAST = { waitMs: 200 };

let sidecars;
let client;
before(async () => {
  sidecars = await testSidecars();
  client = await connect({ socket: sidecars.socket });
});
after(async () => {
  await client?.close();
  await sidecars?.stop();
});

function traceparentOf(span) {
  const { traceId, spanId, traceFlags } = span.spanContext();
  return `00-${traceId}-${spanId}-${traceFlags.toString(16).padStart(2, '0')}`;
}

async function popAll(queue) {
  const { messages } = await client.pop(queue, { group: 'check', batch: 100, autoAck: true });
  return messages;
}

describe('without a registered SDK (the API alone is a no-op)', () => {
  test('a push inside a span adds no headers', async () => {
    const queue = uniqueQueue('otel-noop');
    await trace.getTracer('tests').startActiveSpan('checkout', async (span) => {
      await client.push([{ queue, payload: 1 }]);
      span.end();
    });
    const [m] = await popAll(queue);
    assert.equal(m.headers, undefined);
  });
});

describe('with the OpenTelemetry SDK', () => {
  const exporter = new InMemorySpanExporter();
  const tracer = trace.getTracer('tests');
  const spansNamed = (name) => exporter.getFinishedSpans().filter((s) => s.name === name);

  before(() => {
    trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }));
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  });
  after(() => {
    trace.disable();
    context.disable();
    propagation.disable();
  });

  // Runs fn inside an active span named name, and returns that span.
  async function inSpan(name, fn) {
    return tracer.startActiveSpan(name, async (span) => {
      try {
        await fn();
      } finally {
        span.end();
      }
      return span;
    });
  }

  function checkConsumerSpan(span, message, producer, group) {
    assert.equal(span.name, `process ${message.queue}`);
    assert.equal(span.kind, SpanKind.CONSUMER);
    assert.equal(span.spanContext().traceId, producer.spanContext().traceId);
    assert.equal(span.parentSpanContext?.spanId, producer.spanContext().spanId);
    assert.deepEqual(span.links.map((l) => [l.context.traceId, l.context.spanId]), [
      [producer.spanContext().traceId, producer.spanContext().spanId],
    ]);
    const expected = {
      'messaging.system': 'queenside',
      'messaging.operation.type': 'process',
      'messaging.operation.name': 'process',
      'messaging.destination.name': message.queue,
      'messaging.destination.partition.id': message.partition,
      'messaging.message.id': message.messageId,
      'queenside.transaction_id': message.transactionId,
      'queenside.offset': message.offset,
      'queenside.redelivered': message.redelivered,
    };
    if (group) expected['messaging.consumer.group.name'] = group;
    assert.deepEqual(span.attributes, expected);
  }

  test('push, batch push and transaction carry the active span\'s traceparent; pop returns it untouched', async () => {
    const queue = uniqueQueue('otel-push');
    const item = { queue, payload: 1, headers: { tenant: 't1' } };
    const span = await inSpan('checkout', async () => {
      await client.push(item);
      await client.push([{ queue, payload: 2 }, { queue, payload: 3, headers: new Map([['tenant', 't2']]) }]);
      await client.transaction({ pushes: [{ queue, payload: 4 }] });
    });
    const expected = traceparentOf(span);
    assert.match(expected, TRACEPARENT);
    assert.deepEqual(item.headers, { tenant: 't1' }, 'the app\'s item is not changed');
    const messages = await popAll(queue);
    assert.deepEqual(messages.map((m) => [m.payload, m.headers]), [
      [1, { tenant: 't1', traceparent: expected }],
      [2, { traceparent: expected }],
      [3, { tenant: 't2', traceparent: expected }],
      [4, { traceparent: expected }],
    ]);
  });

  test('pushTx carries it too, in the headers it sends as JSON', async () => {
    const sent = [];
    const db = {
      query: async (text, values) => {
        sent.push(values);
        const n = values[1].length;
        return { rows: [{ statuses: Array(n).fill('queued'), offsets: Array(n).fill('0'), message_ids: Array(n).fill('m'), transaction_ids: Array(n).fill('t') }] };
      },
    };
    const span = await inSpan('checkout', () => pushTx(db, [{ queue: 'q', payload: 1, headers: { tenant: 't1' } }, { queue: 'q', payload: 2 }]));
    const expected = traceparentOf(span);
    assert.equal(sent.length, 1, 'one statement for the queue');
    assert.deepEqual(sent[0][4].map((json) => JSON.parse(json)), [{ tenant: 't1', traceparent: expected }, { traceparent: expected }]);
  });

  test('a traceparent the app set is kept; outside any span nothing is added', async () => {
    const queue = uniqueQueue('otel-own');
    const own = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
    await inSpan('checkout', () => client.push({ queue, payload: 1, headers: { traceparent: own, tracestate: 'app=1' } }));
    await client.push({ queue, payload: 2 });
    const messages = await popAll(queue);
    assert.deepEqual(messages.map((m) => m.headers), [{ traceparent: own, tracestate: 'app=1' }, undefined]);
  });

  test('an item already at the 64-header limit goes without trace context rather than fail', async () => {
    const queue = uniqueQueue('otel-full');
    const full = Object.fromEntries(Array.from({ length: 64 }, (_, i) => [`h${i}`, 'x']));
    let results;
    await inSpan('checkout', async () => {
      results = await client.push({ queue, payload: 1, headers: full });
    });
    assert.equal(results[0].status, 'queued');
    const [m] = await popAll(queue);
    assert.deepEqual(m.headers, full);
  });

  test('consume(): the handler runs in a CONSUMER span, child of the pushed context and linked to it', async () => {
    const queue = uniqueQueue('otel-consume');
    const producer = await inSpan('checkout', () => client.push({ queue, partition: 'p1', payload: 'order' }));
    const stop = new AbortController();
    let message;
    let active;
    await client.consume(queue, async (msg) => {
      message = msg;
      await new Promise((r) => setImmediate(r)); // stays active across awaits
      active = trace.getActiveSpan();
      tracer.startSpan('bill').end();
      stop.abort();
    }, { group: 'billing', ...FAST, signal: stop.signal });
    const [span] = spansNamed(`process ${queue}`);
    checkConsumerSpan(span, message, producer, 'billing');
    assert.equal(span.status.code, SpanStatusCode.UNSET);
    assert.equal(active.spanContext().spanId, span.spanContext().spanId);
    const [bill] = spansNamed('bill');
    assert.equal(bill.parentSpanContext?.spanId, span.spanContext().spanId, 'the handler\'s spans nest under it');
  });

  test('consume(): a handler that throws marks its span failed, with the exception', async () => {
    const queue = uniqueQueue('otel-throw');
    const producer = await inSpan('checkout', () => client.push({ queue, payload: 'order' }));
    const stop = new AbortController();
    const totals = await client.consume(queue, async (msg) => {
      if (!msg.redelivered) throw new TypeError('card declined');
      stop.abort();
    }, { ...FAST, signal: stop.signal });
    assert.deepEqual(totals, { completed: 1, failed: 1 });
    const [failed, retried] = spansNamed(`process ${queue}`);
    assert.equal(failed.status.code, SpanStatusCode.ERROR);
    assert.equal(failed.status.message, 'TypeError: card declined');
    assert.deepEqual(failed.events.map((e) => [e.name, e.attributes['exception.type'], e.attributes['exception.message']]), [
      ['exception', 'TypeError', 'card declined'],
    ]);
    assert.equal(retried.status.code, SpanStatusCode.UNSET);
    for (const span of [failed, retried]) {
      assert.equal(span.parentSpanContext?.spanId, producer.spanContext().spanId);
      assert.equal(span.links.length, 1);
      assert.equal(span.attributes['messaging.consumer.group.name'], undefined, 'queue mode');
    }
  });

  test('consume(): pushes from the handler carry the consumer span; a message without context gets no link', async () => {
    const queue = uniqueQueue('otel-forward');
    const out = `${queue}-out`;
    await client.push({ queue, payload: 21 });
    const stop = new AbortController();
    await client.consume(queue, async (msg) => {
      await client.push({ queue: out, payload: msg.payload * 2 });
      stop.abort();
    }, { ...FAST, signal: stop.signal });
    const [span] = spansNamed(`process ${queue}`);
    assert.equal(span.parentSpanContext, undefined);
    assert.deepEqual(span.links, []);
    const [forwarded] = await popAll(out);
    assert.deepEqual(forwarded.headers, { traceparent: traceparentOf(span) });
  });

  test('a message without trace context gets the loop\'s active span as parent, and no link', async () => {
    const queue = uniqueQueue('otel-ambient');
    await client.push({ queue, payload: 'untraced' });
    const stop = new AbortController();
    const worker = await inSpan('worker', () => client.consume(queue, () => stop.abort(), { ...FAST, signal: stop.signal }));
    const [span] = spansNamed(`process ${queue}`);
    assert.equal(span.parentSpanContext?.spanId, worker.spanContext().spanId);
    assert.deepEqual(span.links, []);
  });

  test('messages(): a span per message, ended when the loop moves on; traceContext nests the body\'s spans', async () => {
    const queue = uniqueQueue('otel-iter');
    const producer = await inSpan('checkout', () => client.push([{ queue, payload: 'a' }, { queue, payload: 'b' }]));
    const seen = [];
    await assert.rejects(async () => {
      for await (const msg of client.messages(queue, { group: 'g', batch: 2, ...FAST })) {
        seen.push(msg);
        context.with(msg.traceContext, () => tracer.startSpan(`work ${msg.payload}`).end());
        if (msg.payload === 'b') throw new Error('stop here');
      }
    }, /stop here/);
    const [a, b] = spansNamed(`process ${queue}`);
    checkConsumerSpan(a, seen[0], producer, 'g');
    checkConsumerSpan(b, seen[1], producer, 'g');
    assert.equal(a.status.code, SpanStatusCode.UNSET);
    assert.equal(b.status.code, SpanStatusCode.ERROR, 'leaving the loop with b in hand failed it');
    assert.equal(spansNamed('work a')[0].parentSpanContext?.spanId, a.spanContext().spanId);
    assert.equal(spansNamed('work b')[0].parentSpanContext?.spanId, b.spanContext().spanId);
    assert.equal(Object.keys(seen[0]).includes('traceContext'), false, 'not enumerable: messages stay plain data');
  });

  test('the W3C header round-trips through the registered propagator', () => {
    const header = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
    const carrier = {};
    propagation.inject(propagation.extract(ROOT_CONTEXT, { traceparent: header }), carrier);
    assert.deepEqual(carrier, { traceparent: header });
  });
});

describe('without @opentelemetry/api installed', () => {
  test('the API is found here, for the tests above', () => {
    assert.notEqual(otelApi(), null);
  });

  // A copy of the client whose module resolution cannot reach the API: its
  // own node_modules holds only @msgpack/msgpack.
  test('the client works as before: no headers, no spans, no errors', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'queenside-no-otel-'));
    try {
      cpSync(join(PACKAGE_DIR, 'src'), join(dir, 'src'), { recursive: true });
      cpSync(join(PACKAGE_DIR, 'package.json'), join(dir, 'package.json'));
      mkdirSync(join(dir, 'node_modules', '@msgpack'), { recursive: true });
      symlinkSync(join(PACKAGE_DIR, 'node_modules', '@msgpack', 'msgpack'), join(dir, 'node_modules', '@msgpack', 'msgpack'));
      writeFileSync(join(dir, 'check.mjs'), NO_OTEL_SCRIPT);
      const queue = uniqueQueue('no-otel');
      const { stdout } = await run(process.execPath, ['check.mjs', sidecars.socket, queue], { cwd: dir, timeout: 30_000 });
      assert.deepEqual(JSON.parse(stdout), {
        apiResolvable: false,
        otelApi: null,
        pushed: 'queued',
        popped: [[1, null], [2, { tenant: 't1' }]],
        consumed: { completed: 2, failed: 0 },
      });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

const NO_OTEL_SCRIPT = `
import { createRequire } from 'node:module';
import { connect } from './src/index.js';
import { otelApi } from './src/tracing.js';

const [socket, queue] = process.argv.slice(2);
let apiResolvable = true;
try {
  createRequire(new URL('./src/tracing.js', import.meta.url)).resolve('@opentelemetry/api');
} catch {
  apiResolvable = false;
}
const client = await connect({ socket });
const results = await client.push([{ queue, payload: 1 }, { queue, payload: 2, headers: { tenant: 't1' } }]);
await client.transaction({ pushes: [{ queue, payload: 3 }] });
const { messages } = await client.pop(queue, { group: 'peek', batch: 2, autoAck: true });
const stop = new AbortController();
let n = 0;
const consumed = await client.consume(queue, () => { if (++n === 2) stop.abort(); }, { batch: 2, waitMs: 200, signal: stop.signal });
await client.close();
console.log(JSON.stringify({
  apiResolvable,
  otelApi: otelApi(),
  pushed: results[0].status,
  popped: messages.map((m) => [m.payload, m.headers ?? null]),
  consumed,
}));
`;
