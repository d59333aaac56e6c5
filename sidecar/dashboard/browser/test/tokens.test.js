// Read tokens and admin tokens: a sidecar started with --read-token-file
// shows nothing until it is given a token; a read token reads and is
// refused every write; an admin token writes, and the sidecar logs the
// write under the token's name. A scoped token sees its queues only, and
// the page shows the API's refusal of what its scope lacks.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { connect, startSecondSidecar, startSidecar, uniqueQueue } from '../harness.js';
import { launch, openPage, text } from '../browser.js';

let main;
let guarded;
let client;
let browser;
const readToken = randomBytes(24).toString('hex');
const aliceToken = randomBytes(24).toString('hex');
const teamReadToken = randomBytes(24).toString('hex');
const viewerToken = randomBytes(24).toString('hex');
const team = uniqueQueue('team');

before(async () => {
  main = await startSidecar();
  const readFile = join(main.dir, 'read-tokens');
  const adminFile = join(main.dir, 'admin-tokens');
  writeFileSync(readFile, `# dashboards that only look\ngrafana:${readToken}\nteam-ro:${teamReadToken} queues=${team}.* rights=read\n`, { mode: 0o600 });
  writeFileSync(adminFile, `alice:${aliceToken}\nviewer:${viewerToken} rights=read\n`, { mode: 0o600 });
  guarded = await startSecondSidecar(main, {
    name: 'guarded', args: ['--read-token-file', readFile, '--admin-token-file', adminFile, '--log-level', 'info'],
  });
  client = await connect({ socket: main.socket });
  browser = await launch();
});

after(async () => {
  if (browser) await browser.close();
  if (client) await client.close();
  if (guarded) await guarded.stop();
  if (main) await main.stop();
});

async function giveToken(page, token) {
  await page.waitForSelector('#token-dialog[open]');
  await page.click('#token-input', { clickCount: 3 });
  await page.type('#token-input', token);
  await page.click('#token-save');
  await page.waitForSelector('#token-dialog:not([open])');
}

test('queenside dev signs the browser in by the link it prints, and its dashboard writes', async () => {
  const dev = await startSidecar({ devToken: true, args: ['--log-level', 'info'] });
  try {
    assert.match(dev.signIn, /^http:\/\/127\.0\.0\.1:\d+\/#token=\w{32,}$/, dev.output());
    assert.match(dev.output(), /signs you in with the admin token in \S+admin-token/);
    assert.equal(statSync(join(dev.dir, 'pg', 'admin-token')).mode & 0o777, 0o600, 'the token file is its user\'s alone');
    const c = await connect({ socket: dev.socket });
    const q = uniqueQueue('devsignin');
    await c.push({ queue: q, payload: 1 });
    await c.close();
    const page = await openPage(browser);
    await page.goto(dev.signIn);
    await page.waitForFunction(() => document.getElementById('token-button').textContent === 'Admin token ✓');
    assert.ok(!page.url().includes(dev.token), `the token left the address bar: ${page.url()}`);
    // a write, which a dashboard without a token is refused
    await page.goto(`${dev.url}#/queues/${encodeURIComponent(q)}`);
    await page.waitForSelector('#pause-toggle:not([disabled])');
    await page.click('#pause-toggle');
    await page.waitForSelector('#confirm-dialog[open]');
    await page.click('#confirm-ok');
    await page.waitForSelector('#queue-badges [data-badge=paused]');
    const writes = dev.output().split('\n').filter((l) => l.includes('dashboard write'));
    assert.ok(writes.some((l) => /token=dev method=POST path=\/api\/queues\/\S+\/pause/.test(l)), `the write logged under the name dev:\n${dev.output()}`);
    assert.ok(!writes.some((l) => l.includes(dev.token)), 'the token itself is not logged');
    const problems = [...page.problems];
    await page.close();
    assert.deepEqual(problems, [], 'the page had problems');
  } finally {
    await dev.stop();
  }
});

test('a sidecar with read tokens asks for one, reads with it, and writes only with an admin token', async () => {
  const q = uniqueQueue('guarded');
  await client.push({ queue: q, payload: { hello: 'world' } });
  const page = await openPage(browser);
  page.allow403(/\/pause$/);

  // Nothing is read before a token is given: no request fails with 401.
  await page.goto(`${guarded.url}#/queues`);
  await page.waitForSelector('#token-dialog[open]');
  assert.equal(await text(page, '#token-button'), 'Token needed');
  assert.match(await text(page, '#token-needed'), /--read-token-file/);
  assert.match(await text(page, '#token-status'), /need a token/);
  const unauthorized = await page.evaluate(async () => (await fetch('api/queues')).status);
  assert.equal(unauthorized, 401, 'the API itself refuses a read without a token');
  page.problems.length = 0; // that 401 was asked for

  // The read token shows the pages.
  await giveToken(page, readToken);
  assert.equal(await text(page, '#token-button'), 'Read token ✓');
  await page.waitForSelector(`[data-queue="${q}"]`);

  // ... and is refused a write, which says why.
  await page.goto(`${guarded.url}#/queues/${encodeURIComponent(q)}`);
  await page.waitForSelector('#pause-toggle:not([disabled])');
  await page.click('#pause-toggle');
  await page.waitForSelector('#confirm-dialog[open]');
  await page.click('#confirm-ok');
  await page.waitForSelector('#pause-status.error');
  assert.match(await text(page, '#pause-status'), /403 forbidden.*"grafana" may only read/);

  // An admin token writes, and the sidecar logs who wrote what.
  await page.click('#token-button');
  await giveToken(page, aliceToken);
  assert.equal(await text(page, '#token-button'), 'Admin token ✓');
  await page.waitForSelector('#pause-toggle:not([disabled])');
  await page.click('#pause-toggle');
  await page.waitForSelector('#confirm-dialog[open]');
  await page.click('#confirm-ok');
  await page.waitForSelector('#queue-badges [data-badge=paused]');
  const log = guarded.output();
  assert.match(log, /dashboard write refused: token=grafana method=POST path=\/api\/queues\/\S+\/pause/);
  assert.match(log, new RegExp(`dashboard write: token=alice method=POST path=/api/queues/${q}/pause body=.*paused.*true.* status=200`));
  assert.ok(!log.includes(readToken) && !log.includes(aliceToken), 'no token is logged');
  assert.ok(!page.consoleTexts.some((t) => t.includes(readToken) || t.includes(aliceToken)), 'no token in the console');
  const problems = [...page.problems];
  await page.close();
  assert.deepEqual(problems, [], 'the page had problems');
});

test('a scoped token sees its queues only, and the page shows what its scope refuses', async () => {
  const mine = `${team}.invoices`;
  const other = uniqueQueue('other');
  await client.push({ queue: mine, payload: 1 });
  await client.push({ queue: other, payload: 2 });
  const page = await openPage(browser);
  page.allow403(new RegExp(`${other}|/pause$|/api/history$`));

  await page.goto(`${guarded.url}#/queues`);
  await giveToken(page, teamReadToken);
  assert.equal(await text(page, '#token-button'), 'Read token ✓ (scoped)');
  assert.match(await page.$eval('#token-button', (b) => b.title), new RegExp(`queues=${team}\\.\\* rights=read`));
  await page.waitForSelector(`[data-queue="${mine}"]`);
  assert.equal(await page.$(`[data-queue="${other}"]`), null, 'another team\'s queue is listed');

  // Another queue's page says which right the token lacks there.
  await page.goto(`${guarded.url}#/queues/${encodeURIComponent(other)}`);
  await page.waitForSelector('#banner:not([hidden])');
  assert.match(await text(page, '#banner'), new RegExp(`"team-ro" may not read ${other}: its scope is queues=${team}\\.\\* rights=read`));

  // An admin token that may only read is refused a write, which the page
  // shows as the API says it.
  await page.click('#token-button');
  await giveToken(page, viewerToken);
  assert.equal(await text(page, '#token-button'), 'Admin token ✓ (scoped)');
  await page.goto(`${guarded.url}#/queues/${encodeURIComponent(mine)}`);
  await page.waitForSelector('#pause-toggle:not([disabled])');
  await page.click('#pause-toggle');
  await page.waitForSelector('#confirm-dialog[open]');
  await page.click('#confirm-ok');
  await page.waitForSelector('#pause-status.error');
  const status = await text(page, '#pause-status');
  assert.match(status, new RegExp(`403 forbidden.*"viewer" may not manage ${mine}: its scope is queues=\\* rights=read`));
  assert.ok(!status.includes('Set an admin token'), status);
  assert.match(guarded.output(), /dashboard write refused: token=viewer method=POST/);
  const problems = [...page.problems];
  await page.close();
  assert.deepEqual(problems, [], 'the page had problems');
});
