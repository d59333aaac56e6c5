// consume() in a program of its own, stopped as a user stops it: SIGINT or
// SIGTERM, with no option asking for it. The message in hand finishes and
// is acked, the rest of what was leased is released at once (another
// consumer pops it without waiting for the lease), and a second Ctrl-C
// ends a program whose handler hangs.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { connect } from '../src/index.js';
import { testSidecars, uniqueQueue } from './harness.js';

const CLIENT_URL = new URL('../src/index.js', import.meta.url).href;

// Handles each message for HANDLER_MS milliseconds.
const WORKER = `
import { connect } from '${CLIENT_URL}';
const [socket, queue] = process.argv.slice(2);
const client = await connect({ socket });
const totals = await client.consume(queue, async (msg) => {
  console.log('handling', msg.payload);
  await new Promise((resolve) => setTimeout(resolve, Number(process.env.HANDLER_MS)));
  console.log('handled', msg.payload);
}, { group: 'g' });
console.log('stopped', JSON.stringify(totals));
await client.close();
`;

let sidecars;
let client;
let dir;
before(async () => {
  sidecars = await testSidecars();
  client = await connect({ socket: sidecars.socket });
  dir = mkdtempSync(join(tmpdir(), 'queenside-signals-'));
  writeFileSync(join(dir, 'worker.mjs'), WORKER);
});
after(async () => {
  await client?.close();
  await sidecars?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

function startWorker(queue, handlerMs) {
  const child = spawn(process.execPath, [join(dir, 'worker.mjs'), sidecars.socket, queue], {
    env: { ...process.env, HANDLER_MS: String(handlerMs) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => { stdout += d; });
  child.stderr.on('data', (d) => { stderr += d; });
  const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  return {
    child,
    exited,
    output: () => ({ stdout, stderr }),
    async waitFor(text) {
      const deadline = Date.now() + 30_000;
      while (!stdout.includes(text)) {
        if (child.exitCode !== null || Date.now() > deadline) assert.fail(`no "${text}" from the worker: ${stdout}${stderr}`);
        await sleep(20);
      }
    },
  };
}

async function pushAll(queue, payloads) {
  const results = await client.push(payloads.map((payload) => ({ queue, partition: 'p', payload })));
  assert.ok(results.every((r) => r.status === 'queued'));
}

for (const signal of ['SIGINT', 'SIGTERM']) {
  test(`${signal}: the message in hand is finished and acked, the rest released at once`, async () => {
    const queue = uniqueQueue(`signal-${signal}`);
    await pushAll(queue, [1, 2, 3, 4, 5]);
    const worker = startWorker(queue, 500);
    try {
      await worker.waitFor('handling 1');
      worker.child.kill(signal);
      const { code } = await worker.exited;
      const { stdout, stderr } = worker.output();
      assert.equal(code, 0, stderr);
      assert.equal(stdout, 'handling 1\nhandled 1\nstopped {"completed":1,"failed":0}\n');
      // The partition is free now, not once its 60 s lease has run out.
      const { messages } = await client.pop(queue, { group: 'g', batch: 10 });
      assert.deepEqual(messages.map((m) => [m.payload, m.redelivered]), [[2, true], [3, true], [4, true], [5, true]]);
      await client.ack(messages);
    } finally {
      worker.child.kill('SIGKILL');
    }
  });
}

test('a second Ctrl-C ends a program whose handler hangs', async () => {
  const queue = uniqueQueue('second-sigint');
  await pushAll(queue, [1]);
  const worker = startWorker(queue, 3_600_000);
  try {
    await worker.waitFor('handling 1');
    worker.child.kill('SIGINT');
    await sleep(300);
    assert.equal(worker.child.exitCode, null, 'the first asks the loop to stop: the handler is still running');
    worker.child.kill('SIGINT');
    const { signal } = await worker.exited;
    assert.equal(signal, 'SIGINT', 'the second is handled as it would be without consume()');
  } finally {
    worker.child.kill('SIGKILL');
  }
});
