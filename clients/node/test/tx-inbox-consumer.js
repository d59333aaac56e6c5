// A consumer in a process of its own, for tx.test.js's inbox under SIGKILL:
// it pops through the sidecar and, for each message, writes the effect and
// acks the message in one PostgreSQL transaction (ackTx). At each point of
// that work it prints where it is ("effect 7") and waits for the test's
// word on stdin: "go" goes on; the test may SIGKILL it instead. At
// "committing" it does not wait: the kill races the COMMIT.
//
// A message delivered again after its effect committed would fail the
// INSERT (the table's key is the message id): the process then exits with
// an error, and the test fails.
//
// Environment: QUEENSIDE_SOCKET, DATABASE_URL, QUEUE, EFFECTS (the table).
import { createInterface } from 'node:readline';
import pg from 'pg';
import { ackTx, connect } from '../src/index.js';

const { QUEENSIDE_SOCKET: socket, DATABASE_URL: databaseUrl, QUEUE: queue, EFFECTS: effects } = process.env;

const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();

async function word() {
  const { value, done } = await lines.next();
  if (done) process.exit(0); // the test is gone
  return value;
}

function say(line) {
  process.stdout.write(`${line}\n`);
}

async function at(point, offset) {
  say(`${point} ${offset}`);
  await word();
}

const client = await connect({ socket });
const db = new pg.Client({ connectionString: databaseUrl });
await db.connect();

for (;;) {
  const { messages } = await client.pop(queue, { group: 'inbox', batch: 2, waitMs: 200, leaseSeconds: 1 });
  if (messages.length === 0) {
    say('idle');
    if ((await word()) === 'exit') break;
    continue;
  }
  for (const msg of messages) {
    await at('popped', msg.offset);
    await db.query('BEGIN');
    await db.query(`INSERT INTO ${effects} (message_id, n) VALUES ($1, $2)`, [msg.messageId, msg.payload]);
    await at('effect', msg.offset);
    const { results: [ack] } = await ackTx(db, msg);
    if (!ack.success) {
      // The lease ended first (a slow machine): the message comes again.
      await db.query('ROLLBACK');
      say(`refused ${msg.offset} ${ack.code}`);
      await word();
      continue;
    }
    await at('acked', msg.offset);
    say(`committing ${msg.offset}`);
    await db.query('COMMIT');
    await at('committed', msg.offset);
  }
}
await db.end();
await client.close();
process.exit(0); // stdin would keep it alive
