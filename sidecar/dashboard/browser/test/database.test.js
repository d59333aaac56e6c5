// The database page in headless Chromium against a real sidecar, with a
// transaction held open on the sidecar's PostgreSQL by psql: the page
// names it as the oldest, states its sentence once it is a minute old,
// lists the queue tables' sizes and counts the connections by state and
// by application. Saves the screenshot "database".
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { uniqueQueue } from '../harness.js';
import { openPage, text, waitValue } from '../browser.js';
import { closeSuite, openSuite } from '../suite.js';

let sidecar;
let client;
let browser;
let shots;
let held;

/** psql: $PSQL, else the newest of Debian's PostgreSQL versions, else the PATH's. */
function psqlPath() {
  if (process.env.PSQL) return process.env.PSQL;
  const base = '/usr/lib/postgresql';
  const versions = existsSync(base) ? readdirSync(base).filter((v) => /^\d+$/.test(v)).sort((a, b) => b - a) : [];
  const found = versions.map((v) => join(base, v, 'bin', 'psql')).find((p) => existsSync(p));
  return found || 'psql';
}

/**
 * A transaction with a transaction id, left open by psql under the
 * application name "held-open" until end() rolls it back.
 */
async function holdTransaction(databaseUrl) {
  const child = spawn(psqlPath(), ['-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1', databaseUrl], {
    env: { ...process.env, PGAPPNAME: 'held-open' },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout.on('data', (d) => { out += d; });
  child.stderr.on('data', (d) => { out += d; });
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.stdin.write('BEGIN;\nSELECT txid_current(), pg_backend_pid();\n');
  const deadline = Date.now() + 15_000;
  while (!/^\d+\|\d+$/m.test(out)) {
    if (child.exitCode !== null || Date.now() > deadline) throw new Error(`psql did not open the transaction: ${out}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    pid: Number(/^\d+\|(\d+)$/m.exec(out)[1]),
    async end() {
      child.stdin.end('ROLLBACK;\n');
      await exited;
    },
  };
}

before(async () => {
  ({ sidecar, client, browser, shots } = await openSuite());
  assert.ok(sidecar.databaseUrl, 'queenside dev printed its database URL');
  held = await holdTransaction(sidecar.databaseUrl);
});

after(async () => {
  if (held) await held.end();
  await closeSuite({ sidecar, client, browser, shots });
});

test('the database page states what holds back vacuum, the tables\' sizes and the connections', async () => {
  const q = uniqueQueue('health');
  await client.push(Array.from({ length: 200 }, (_, i) => ({ queue: q, partition: `p-${i % 10}`, payload: { i, pad: 'x'.repeat(200) } })));

  const page = await openPage(browser);
  await page.goto(`${sidecar.url}#/database`, { waitUntil: 'load' });
  await page.waitForSelector('section[data-ready="true"]');
  assert.equal(await page.$eval('a[data-nav="database"]', (a) => a.getAttribute('aria-current')), 'page');

  // The transaction is the oldest from the start; its sentence comes at a minute.
  await page.waitForFunction((pid) => document.querySelector('#database-oldest [data-field=pid]')?.textContent === String(pid),
    { timeout: 15_000 }, held.pid);
  assert.equal(await text(page, '#database-oldest [data-field=application]'), 'held-open');
  assert.equal(await text(page, '#database-oldest [data-field=state]'), 'idle in transaction');
  assert.match(await text(page, '#database-oldest [data-field=holdsHorizon]'), /^yes, by \d+ transactions$/);

  const problem = `#database-problems li[data-kind="transaction"][data-name="${held.pid}"]`;
  // polled from here: one browser call may not outlast the protocol's minute
  const deadline = Date.now() + 120_000;
  while (!(await page.$(problem))) {
    assert.ok(Date.now() < deadline, 'the transaction\'s sentence did not appear within two minutes');
    await new Promise((r) => setTimeout(r, 1000));
  }
  assert.match(await text(page, problem),
    new RegExp(`^warning A transaction open for 1 min holds back vacuum of the queue tables \\(pid ${held.pid}, "held-open", idle in transaction\\)\\.$`));

  // The queue tables with their sizes: segments holds the 200 messages.
  const segments = '#database-tables tr[data-table="segments"]';
  await page.waitForFunction((sel) => Number(document.querySelector(sel)?.dataset.value) > 8192, { timeout: 15_000 }, `${segments} [data-col=total]`);
  assert.match(await text(page, `${segments} [data-col=total]`), /^\d+(\.\d)? (KiB|MiB)$/);
  for (const table of ['partitions', 'cursors', 'dead_letters', 'queues']) {
    assert.ok(await page.$(`#database-tables tr[data-table="${table}"]`), `${table} is listed`);
  }
  assert.ok(await page.$('#database-indexes tr[data-index="segments_pkey"]'), 'segments_pkey is listed');

  // Connections by state (the psql session among those idle in a
  // transaction) and by application (the sidecar's marked as such).
  await page.waitForFunction(() => Number(document.querySelector('#database-states tr[data-state="idle in transaction"] [data-col=count]')?.dataset.value) >= 1,
    { timeout: 15_000 });
  await waitValue(page, '#database-applications tr[data-application="held-open"] [data-col=idleInTransaction]', 1);
  const info = await (await fetch(`${sidecar.url}api/info`)).json();
  const mine = `#database-applications tr[data-application="queenside/${info.sidecarId}"]`;
  await page.waitForSelector(mine);
  assert.equal(await text(page, `${mine} .badge`), 'sidecar');
  assert.match(await text(page, '#database-replication'), /No standby streams from this server\./);

  await page.screenshot({ path: join(shots, 'database.png'), fullPage: false });

  // Once the transaction ends, its sentence goes, without a reload.
  await held.end();
  held = null;
  await page.waitForFunction((sel) => document.querySelector(sel) === null, { timeout: 15_000 }, problem);
  const problems = [...page.problems];
  await page.close();
  assert.deepEqual(problems, [], 'the page had problems');
});
