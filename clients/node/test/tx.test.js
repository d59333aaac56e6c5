// pushTx and ackTx: pushes and acks inside the application's own
// PostgreSQL transaction (node-postgres), against the test sidecar's
// database; what they store is read back through the sidecar.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import {
  ackTx,
  connect,
  encode,
  InvalidArgumentError,
  NotFoundError,
  pushTx,
  UnavailableError,
  UnsupportedError,
} from '../src/index.js';
import { testSidecars, uniqueQueue } from './harness.js';

const cases = JSON.parse(readFileSync(new URL('../../testdata/cases.json', import.meta.url), 'utf8'));

let sidecars;
let client;
let pool;
before(async () => {
  sidecars = await testSidecars();
  assert.ok(sidecars.databaseUrl, 'queenside dev printed the URL of its database');
  client = await connect({ socket: sidecars.socket });
  pool = new pg.Pool({ connectionString: sidecars.databaseUrl, max: 4 });
});
after(async () => {
  await pool?.end();
  await client?.close();
  await sidecars?.stop();
});

/** A table name no other test uses. */
function uniqueTable(prefix) {
  return `${prefix}_${process.pid}_${Math.random().toString(36).slice(2, 8)}`;
}

/** Runs fn(db) in a transaction on a client of the pool: committed, or rolled back when rollback is true or fn throws. */
async function inTransaction(fn, { rollback = false } = {}) {
  const db = await pool.connect();
  try {
    await db.query('BEGIN');
    const result = await fn(db);
    await db.query(rollback ? 'ROLLBACK' : 'COMMIT');
    return result;
  } catch (err) {
    await db.query('ROLLBACK');
    throw err;
  } finally {
    db.release();
  }
}

/** Every message of queue, for a group of its own, without leases. */
async function everything(queue) {
  const { messages } = await client.pop(queue, { group: uniqueQueue('reader'), batch: 1000, autoAck: true });
  return messages;
}

async function cursorOf(queue, group) {
  const [partition] = (await client.stats(queue)).partitions;
  return partition.groups.find((g) => g.group === group);
}

/** A stand-in for a pg client that records what it is sent. */
function recordingClient() {
  const sent = [];
  return { sent, query: async (text, values) => { sent.push({ text, values }); return { rows: [] }; } };
}

describe('the outbox: pushTx', () => {
  test('commits with the application row; delivered in offset order, payloads as pushed', async () => {
    const queue = uniqueQueue('outbox');
    const orders = uniqueTable('orders');
    await pool.query(`CREATE TABLE ${orders} (id bigserial PRIMARY KEY, customer text NOT NULL)`);

    const events = [
      { queue, partition: 'c-1', payload: { event: 'order-created', order: 1, at: new Date(0) }, headers: { kind: 'created' } },
      { queue, partition: 'c-1', payload: [1, 2n ** 60n, 'three', null], headers: new Map([['kind', 'detail']]), traceId: 'trace-2' },
    ];
    const results = await inTransaction(async (db) => {
      await db.query(`INSERT INTO ${orders} (customer) VALUES ('c-1')`);
      return pushTx(db, events);
    });
    assert.deepEqual(results.map((r) => [r.index, r.status, r.queue, r.partition, r.offset]),
      [[0, 'queued', queue, 'c-1', 0], [1, 'queued', queue, 'c-1', 1]]);
    for (const r of results) {
      assert.match(r.messageId, /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
      assert.equal(typeof r.transactionId, 'string');
    }

    const got = await everything(queue);
    assert.deepEqual(got.map((m) => m.offset), [0, 1]);
    assert.deepEqual(got.map((m) => m.messageId), results.map((r) => r.messageId));
    assert.deepEqual(got.map((m) => m.transactionId), results.map((r) => r.transactionId));
    assert.deepEqual(got[0].payload, { event: 'order-created', order: 1, at: got[0].payload.at });
    assert.equal(got[0].payload.at.getTime(), 0);
    assert.deepEqual(got[1].payload, [1, 2n ** 60n, 'three', null]);
    assert.deepEqual(got.map((m) => m.payloadBytes), events.map((e) => encode(e.payload)), 'the bytes the client encodes');
    assert.deepEqual(got.map((m) => m.headers), [{ kind: 'created' }, { kind: 'detail' }]);
    assert.deepEqual(got.map((m) => m.traceId), [undefined, 'trace-2']);
    assert.equal((await pool.query(`SELECT count(*)::int AS n FROM ${orders}`)).rows[0].n, 1);

    // The same payload through the socket is stored byte for byte alike.
    await client.push({ queue, partition: 'c-1', payload: events[0].payload });
    const again = await everything(queue);
    assert.deepEqual(again[2].payloadBytes, got[0].payloadBytes);
  });

  test('a rollback stores nothing, and the next push gets the next offset', async () => {
    const queue = uniqueQueue('outbox-rollback');
    const orders = uniqueTable('orders');
    await pool.query(`CREATE TABLE ${orders} (id bigserial PRIMARY KEY)`);
    await pushTx(pool, { queue, payload: 'first' }); // a Pool commits each statement on its own
    const rolledBack = await inTransaction(async (db) => {
      await db.query(`INSERT INTO ${orders} DEFAULT VALUES`);
      return pushTx(db, [{ queue, payload: 'gone' }, { queue, payload: 'gone too' }]);
    }, { rollback: true });
    assert.deepEqual(rolledBack.map((r) => r.offset), [1, 2], 'offsets taken inside the transaction');
    assert.equal((await pool.query(`SELECT count(*)::int AS n FROM ${orders}`)).rows[0].n, 0);

    const [next] = await inTransaction((db) => pushTx(db, { queue, payload: 'second' }));
    assert.equal(next.offset, 1, 'no gap');
    const [socket] = await client.push({ queue, payload: 'third' });
    assert.equal(socket.offset, 2);
    assert.deepEqual((await everything(queue)).map((m) => [m.offset, m.payload]), [[0, 'first'], [1, 'second'], [2, 'third']]);
  });

  test('payloadBytes are stored as they are; null is a payload', async () => {
    const queue = uniqueQueue('outbox-bytes');
    const bytes = encode({ forwarded: true });
    await inTransaction((db) => pushTx(db, [{ queue, payloadBytes: bytes }, { queue, payload: null }]));
    const got = await everything(queue);
    assert.deepEqual(got[0].payloadBytes, bytes);
    assert.deepEqual(got.map((m) => m.payload), [{ forwarded: true }, null]);
  });
});

describe('deduplication between pushTx and the socket', () => {
  test('pushTx first, then the socket: duplicate with the first message id', async () => {
    const queue = uniqueQueue('dedup-tx-first');
    const [first] = await inTransaction((db) => pushTx(db, { queue, payload: 1, transactionId: 'order-7' }));
    assert.equal(first.status, 'queued');
    assert.equal(first.transactionId, 'order-7');
    const [second] = await client.push({ queue, payload: 1, transactionId: 'order-7' });
    assert.equal(second.status, 'duplicate');
    assert.equal(second.messageId, first.messageId);
    assert.equal(second.offset, first.offset);
  });

  test('the socket first, then pushTx: duplicate with the first message id', async () => {
    const queue = uniqueQueue('dedup-socket-first');
    const [first] = await client.push({ queue, payload: 1, transactionId: 'order-8' });
    const [second] = await inTransaction((db) => pushTx(db, { queue, payload: 1, transactionId: 'order-8' }));
    assert.deepEqual(second, {
      index: 0, status: 'duplicate', queue, partition: 'Default', transactionId: 'order-8', messageId: first.messageId, offset: first.offset,
    });
    // Twice in one transaction: the second is the first's duplicate.
    const twice = await inTransaction((db) => pushTx(db, [{ queue, payload: 2, transactionId: 'order-9' }, { queue, payload: 2, transactionId: 'order-9' }]));
    assert.deepEqual(twice.map((r) => r.status), ['queued', 'duplicate']);
    assert.equal(twice[1].messageId, twice[0].messageId);
    assert.equal((await everything(queue)).length, 2);
  });
});

describe('the inbox: ackTx', () => {
  test('a rollback leaves the lease as it was; a commit moves the cursor; again: already_acked', async () => {
    const queue = uniqueQueue('inbox');
    const effects = uniqueTable('effects');
    await pool.query(`CREATE TABLE ${effects} (message_id uuid PRIMARY KEY)`);
    await client.push([{ queue, payload: 'a' }, { queue, payload: 'b' }]);
    const { messages, leases } = await client.pop(queue, { group: 'g', batch: 2 });
    const [msg] = messages;

    const handle = (options) => inTransaction(async (db) => {
      await db.query(`INSERT INTO ${effects} VALUES ($1)`, [msg.messageId]);
      return ackTx(db, msg);
    }, options);

    const rolledBack = await handle({ rollback: true });
    assert.deepEqual(rolledBack, { results: [{ index: 0, success: true }], leases: [] });
    let group = await cursorOf(queue, 'g');
    assert.equal(group.cursor, 0);
    assert.equal(group.leased, true, 'the lease as it was');

    const committed = await handle();
    assert.deepEqual(committed.results, [{ index: 0, success: true }]);
    group = await cursorOf(queue, 'g');
    assert.equal(group.cursor, 1);
    assert.equal((await pool.query(`SELECT count(*)::int AS n FROM ${effects}`)).rows[0].n, 1);

    // A failure, by transaction id, rewinds: the message comes again.
    const failed = await inTransaction((db) => ackTx(db, {
      leaseId: leases[0].leaseId, transactionId: messages[1].transactionId, status: 'failed', error: 'x'.repeat(5000),
    }));
    assert.deepEqual(failed.results, [{ index: 0, success: true }]);
    const redelivered = await client.pop(queue, { group: 'g' });
    assert.deepEqual(redelivered.messages.map((m) => [m.offset, m.redelivered]), [[1, true]]);
    // The first lease is over: its message, acked again, says so.
    const again = await ackTx(pool, msg);
    assert.deepEqual(again.results, [{ index: 0, success: false, code: 'already_acked' }]);
    assert.deepEqual((await ackTx(pool, [redelivered.messages[0].completed()])).results, [{ index: 0, success: true }]);
    assert.equal((await cursorOf(queue, 'g')).cursor, 2);
  });

  test('an ack on a lease that is gone is a result, not an error', async () => {
    const result = await ackTx(pool, { leaseId: 'not-a-lease', offset: 0 });
    assert.deepEqual(result.results, [{ index: 0, success: false, code: 'lease_expired' }]);
  });
});

describe('refusals', () => {
  test('a bad queue name: InvalidArgumentError, the PostgreSQL error as its cause', async () => {
    const queue = uniqueQueue('refused');
    const db = await pool.connect();
    try {
      await db.query('BEGIN');
      await assert.rejects(pushTx(db, [{ queue, payload: 1 }, { queue: 'bad queue!', payload: 1 }]), (err) => {
        assert.ok(err instanceof InvalidArgumentError, err);
        assert.equal(err.code, 'invalid_argument');
        assert.equal(err.retryable, false);
        assert.equal(err.op, 'pushTx');
        assert.match(err.message, /^push item 1: queue 'bad queue!' must be/);
        assert.equal(err.cause.detail, 'invalid_argument');
        assert.equal(err.cause.code, '22023');
        return true;
      });
      await db.query('ROLLBACK');
    } finally {
      db.release();
    }
    await assert.rejects(client.stats(queue), NotFoundError, 'the first item rolled back with the rest');
  });

  test('the codes of the DETAIL, each its class; other errors as they are', async () => {
    const failing = (error) => ({ query: async () => { throw error; } });
    const pgError = (detail, code) => Object.assign(new Error(`queenside: it is ${detail}`), { detail, code });
    await assert.rejects(pushTx(failing(pgError('unavailable', '55000')), { queue: 'q', payload: 1 }), (err) => {
      assert.ok(err instanceof UnavailableError);
      assert.equal(err.retryable, true);
      assert.equal(err.message, 'push item 0: it is unavailable');
      return true;
    });
    await assert.rejects(pushTx(failing(pgError('unsupported', '55000')), { queue: 'q', payload: 1 }), UnsupportedError);
    await assert.rejects(ackTx(failing(pgError('invalid_argument', '22023')), { leaseId: 'l', offset: 0 }), (err) => {
      assert.ok(err instanceof InvalidArgumentError);
      assert.equal(err.op, 'ackTx');
      assert.equal(err.message, 'ack item 0: it is invalid_argument');
      return true;
    });
    const other = pgError('something else', '23505');
    await assert.rejects(pushTx(failing(other), { queue: 'q', payload: 1 }), (err) => err === other);
  });

  test('what push refuses is refused before any statement', async () => {
    const db = recordingClient();
    await assert.rejects(pushTx(db, [{ queue: 'q', payload: 1 }, { queue: 'q' }]), (err) => {
      assert.ok(err instanceof InvalidArgumentError);
      assert.equal(err.message, 'push item 1: payload is required');
      assert.equal(err.op, 'pushTx');
      return true;
    });
    await assert.rejects(pushTx(db, []), InvalidArgumentError);
    await assert.rejects(pushTx(db, { queue: 'q', payload: 1, txid: 'x' }), /unknown key txid/);
    await assert.rejects(pushTx(db, { queue: 'q', payload: 1, payloadBytes: encode(1) }), TypeError);
    await assert.rejects(ackTx(db, { leaseId: 'l' }), /exactly one of offset and transactionId/);
    await assert.rejects(ackTx(db, { leaseId: 'l', offset: 1, transactionId: 't' }), InvalidArgumentError);
    await assert.rejects(ackTx(db, { offset: 1 }), /leaseId: is required/);
    await assert.rejects(ackTx(db, { leaseId: 'l', offset: 1.5 }), InvalidArgumentError);
    await assert.rejects(ackTx(db, { leaseId: 'l', offset: 1, status: 'done' }), InvalidArgumentError);
    await assert.rejects(ackTx(db, { leaseId: 'l', offst: 1 }), /unknown key offst/);
    await assert.rejects(ackTx(db, { leaseId: 'l', offset: 1, error: 'a\0b' }), /NUL/);
    await assert.rejects(ackTx(db, []), InvalidArgumentError);
    await assert.rejects(pushTx(pool.query, { queue: 'q', payload: 1 }), TypeError);
    await assert.rejects(ackTx(undefined, { leaseId: 'l', offset: 1 }), TypeError);
    assert.deepEqual(db.sent, [], 'nothing was sent');
  });

  test('the statements: one a queue pushed to, one an ack item, nothing else (no BEGIN, no COMMIT)', async () => {
    const db = recordingClient();
    db.query = async (text, values) => {
      db.sent.push({ text, values });
      if (!text.includes('queenside.send_batch')) return { rows: [{ success: true, code: null, dead_lettered: true }] };
      const n = values[1].length;
      return {
        rows: [{
          statuses: Array(n).fill('queued'),
          offsets: Array.from({ length: n }, (_, k) => String(9007199254740993n + BigInt(k))),
          message_ids: Array(n).fill('m'),
          transaction_ids: Array(n).fill('t'),
        }],
      };
    };
    const pushed = await pushTx(db, [
      { queue: 'q', payload: 1, headers: {} },
      { queue: 'r', payload: 3 },
      { queue: 'q', partition: 'p', payload: 2, transactionId: 't2', headers: { a: 'b' } },
    ]);
    assert.deepEqual(pushed.map((r) => [r.index, r.queue, r.partition, r.offset]),
      [[0, 'q', 'Default', 9007199254740993n], [1, 'r', 'Default', 9007199254740993n], [2, 'q', 'p', 9007199254740994n]],
      'in the items\' order; an offset beyond 2^53 is a bigint');
    const acked = await ackTx(db, [{ leaseId: 'l', offset: 3n, status: 'failed', error: 'é'.repeat(3000) }]);
    assert.deepEqual(acked.results, [{ index: 0, success: true, deadLettered: true }]);
    assert.equal(db.sent.length, 3);
    assert.ok(db.sent.every((s) => /^SELECT .* FROM queenside\.(send_batch|ack_message)\(/.test(s.text)));
    assert.deepEqual(db.sent[0].values, ['q', [Buffer.from([1]), Buffer.from([2])], ['Default', 'p'], [null, 't2'], ['{}', '{"a":"b"}'], null]);
    assert.deepEqual(db.sent[1].values, ['r', [Buffer.from([3])], ['Default'], null, null, null]);
    const [, offset, status, error, transactionId] = db.sent[2].values;
    assert.deepEqual([offset, status, transactionId], ['3', 'failed', null]);
    assert.equal(Buffer.byteLength(error), 4096, 'the error kept as the sidecar keeps it: 4096 bytes, whole characters');
  });

  test('a refusal of one item of a statement names that item', async () => {
    const queue = uniqueQueue('named');
    await assert.rejects(inTransaction((db) => pushTx(db, [
      { queue: `${queue}-a`, payload: 1 },
      { queue: `${queue}-b`, payload: 2 },
      { queue: `${queue}-a`, payload: new Uint8Array(16 << 20) },
    ])), (err) => {
      assert.ok(err instanceof InvalidArgumentError, err);
      assert.match(err.message, /^push item 2: .*--max-frame-bytes/);
      return true;
    });
  });
});

describe('several queues in one call', () => {
  test('a statement a queue; the results in the items\' order', async () => {
    const queue = uniqueQueue('several');
    const queues = ['a', 'b', 'a', 'c', 'b', 'a'].map((q) => `${queue}-${q}`);
    const items = queues.map((q, i) => ({ queue: q, partition: 'p', payload: i, headers: { i: String(i) } }));
    items[5].transactionId = 'same';
    items.push({ queue: queues[0], partition: 'p', payload: 6, transactionId: 'same' });
    const results = await inTransaction((db) => pushTx(db, items));
    assert.deepEqual(results.map((r) => [r.index, r.queue, r.partition, r.offset, r.status]),
      [0, 0, 1, 0, 1, 2, 2].map((offset, i) => [i, items[i].queue, 'p', offset, i === 6 ? 'duplicate' : 'queued']));
    assert.equal(results[6].messageId, results[5].messageId);
  });
});

describe('cases.json, through pushTx', () => {
  for (const c of cases.pushRefusals) {
    test(`${JSON.stringify(c.item)}: ${c.error}, before anything is sent`, async () => {
      const db = recordingClient();
      await assert.rejects(pushTx(db, [{ queue: 'q', payload: 'first' }, c.item]), (err) => {
        assert.ok(err instanceof InvalidArgumentError, err);
        assert.equal(err.message, `push item 1: ${c.error}`);
        return true;
      });
      assert.deepEqual(db.sent, []);
    });
  }
  for (const c of cases.pushAccepted) {
    test(`${JSON.stringify(c.item)}: ${c.why}`, async () => {
      const queue = uniqueQueue('accepted-tx');
      const [result] = await inTransaction((db) => pushTx(db, { ...c.item, queue }));
      assert.equal(result.status, 'queued');
      assert.deepEqual((await everything(queue)).map((m) => m.payload), [c.item.payload]);
    });
  }
  for (const c of cases.unknownOptions.filter((u) => u.call === 'pushItem')) {
    test(`${JSON.stringify(c.options)}: refused, naming ${c.names.join(', ')}`, async () => {
      const db = recordingClient();
      await assert.rejects(pushTx(db, c.options), (err) => {
        assert.ok(err instanceof TypeError, err);
        for (const name of c.names) assert.match(err.message, new RegExp(`\\b${name}\\b`));
        return true;
      });
      assert.deepEqual(db.sent, []);
    });
  }
});

// The inbox under crashes: a consumer process (tx-inbox-consumer.js) pops,
// writes its effect and acks in one transaction, and is killed with SIGKILL
// at points the test picks at random: after the pop, after the effect,
// after the ack, during the COMMIT (racing it) and after it. It is started
// again until every message is done. Every effect must be applied exactly
// once, and no message whose effect committed may be delivered again.
describe('the inbox under SIGKILL', () => {
  const CONSUMER = fileURLToPath(new URL('./tx-inbox-consumer.js', import.meta.url));
  const MESSAGES = 50;
  // Each kill waits at a point; every point comes up once a message, so a
  // plan of kills is used up long before the messages are.
  const PLAN = ['effect', 'committed', 'acked', 'committing', 'committed', 'popped', 'committed'];

  test('every effect exactly once; nothing acked delivered again', { timeout: 120_000 }, async () => {
    const queue = uniqueQueue('inbox-kill');
    const effects = uniqueTable('inbox_effects');
    await pool.query(`CREATE TABLE ${effects} (message_id uuid PRIMARY KEY, n integer NOT NULL UNIQUE)`);
    const pushed = await client.push(Array.from({ length: MESSAGES }, (_, n) => ({ queue, payload: n, transactionId: `m${n}` })));
    assert.ok(pushed.every((r) => r.status === 'queued'));

    const plan = [...PLAN];
    const killedAt = [];
    const committed = new Set(); // offsets whose commit the consumer reported
    const count = async () => (await pool.query(`SELECT count(*)::int AS n FROM ${effects}`)).rows[0].n;
    let runs = 0;
    const started = Date.now();

    for (let done = false; !done;) {
      assert.ok(runs < 40, `still not done after ${runs} runs`);
      runs += 1;
      const child = spawn(process.execPath, [CONSUMER], {
        env: { ...process.env, QUEENSIDE_SOCKET: sidecars.socket, DATABASE_URL: sidecars.databaseUrl, QUEUE: queue, EFFECTS: effects },
        stdio: ['pipe', 'pipe', 'pipe'],
      });
      let stderr = '';
      child.stderr.on('data', (d) => { stderr += d; });
      const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
      let killed = false;
      try {
        for await (const line of createInterface({ input: child.stdout })) {
          if (process.env.TX_DEBUG) console.error(`# consumer ${runs}: ${line}`);
          const [point, offsetText] = line.split(' ');
          const offset = Number(offsetText);
          if (point === 'popped') assert.ok(!committed.has(offset), `offset ${offset} was delivered again after its commit`);
          if (point === 'committed') committed.add(offset);
          if (point === 'idle') {
            done = (await count()) === MESSAGES;
            child.stdin.write(done ? 'exit\n' : 'go\n');
            continue;
          }
          if (plan[0] === point && Math.random() < 0.5) {
            child.kill('SIGKILL');
            killed = true;
            killedAt.push(`${point} ${offset}`);
            plan.shift();
            break;
          }
          if (point !== 'committing') child.stdin.write('go\n');
        }
      } finally {
        if (!killed && !done) child.kill('SIGKILL'); // a failed assertion
      }
      const { code, signal } = await exited;
      if (killed) assert.equal(signal, 'SIGKILL');
      else assert.equal(code, 0, `the consumer failed:\n${stderr}`);
    }

    const { rows } = await pool.query(`SELECT n FROM ${effects} ORDER BY n`);
    assert.deepEqual(rows.map((r) => r.n), Array.from({ length: MESSAGES }, (_, n) => n), 'every effect, once');
    const group = await cursorOf(queue, 'inbox');
    assert.equal(group.cursor, MESSAGES);
    assert.equal(group.lag, 0);
    assert.deepEqual(plan, [], `every planned kill happened (killed at ${killedAt.join(', ')})`);
    console.log(`# inbox under SIGKILL: ${runs} runs, killed at ${killedAt.join(', ')}; ${((Date.now() - started) / 1000).toFixed(1)} s`);
  });
});
