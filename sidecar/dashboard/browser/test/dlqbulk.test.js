// Bulk actions on dead letters in a real browser: 10,000 dead letters made
// for real (a queue with retryLimit 0, acks failed through the Node
// client), counted by error, replayed and deleted by filter in batches
// with a confirmation of the count, a replay stopped halfway and started
// again, and a deletion of those selected.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { failed, uniqueQueue } from '../harness.js';
import { finishPage, openPage, text, waitValue } from '../browser.js';
import { closeSuite, openSuite } from '../suite.js';

const DEAD = 10_000;
const PARTITIONS = 100;

let sidecar;
let client;
let browser;
let shots;

before(async () => {
  ({ sidecar, client, browser, shots } = await openSuite());
});

after(async () => {
  await closeSuite({ sidecar, client, browser, shots });
});

/**
 * Dead-letters n messages spread over PARTITIONS partitions: a failure ends
 * its lease, so each round fails the first message of every lease. One in
 * four dies of 'address invalid', the others of 'card declined'.
 */
async function fillDeadLetters(queue, n) {
  await client.configure(queue, { retryLimit: 0 });
  await client.pop(queue, { group: 'billing' }); // subscribes the group from the start
  for (let i = 0; i < n; i += 5000) {
    await client.push(Array.from({ length: Math.min(5000, n - i) }, (_, k) => ({
      queue, partition: `p${(i + k) % PARTITIONS}`, payload: { order: i + k },
    })));
  }
  let dead = 0;
  while (dead < n) {
    const { messages } = await client.pop(queue, { group: 'billing', batch: 10 * PARTITIONS, partitions: PARTITIONS });
    assert.ok(messages.length > 0, `${dead} of ${n} dead-lettered, then nothing to pop`);
    const firsts = new Map();
    for (const m of messages) if (!firsts.has(m.leaseId)) firsts.set(m.leaseId, m);
    const items = [...firsts.values()].map((m, k) => failed(m, (dead + k) % 4 === 0 ? 'address invalid' : 'card declined'));
    const res = await client.ack(items);
    assert.ok(res.results.every((r) => r.deadLettered));
    dead += items.length;
  }
}

async function visit(route) {
  const page = await openPage(browser);
  await page.goto(`${sidecar.url}#${route}`, { waitUntil: 'load' });
  await page.evaluate((t) => sessionStorage.setItem('queenside.token', t), sidecar.token);
  return page;
}

const finish = (page, shot) => finishPage(page, shots, shot);

async function answerConfirm(page) {
  await page.waitForSelector('#confirm-dialog[open]');
  const said = await text(page, '#confirm-dialog');
  await page.click('#confirm-ok');
  await page.waitForSelector('#confirm-dialog:not([open])');
  return said;
}

const getJSON = async (path) => (await fetch(`${sidecar.url}api/${path}`)).json();

const count = async (queue, extra = '') => getJSON(`dlq?queue=${queue}&count=true&limit=1${extra}`);

/** The sum of messages kept in the queue's partitions. */
async function stored(queue) {
  const stats = await client.stats(queue);
  return stats.partitions.reduce((n, p) => n + p.messages, 0);
}

test('10,000 dead letters: counted by error, replayed by filter, stopped and started again, deleted', async () => {
  const queue = uniqueQueue('bulk');
  const started = Date.now();
  await fillDeadLetters(queue, DEAD);
  console.log(`# ${DEAD} dead letters made in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  for (const path of [`dlq/summary?queue=${queue}`, `dlq?queue=${queue}&count=true&limit=50`, `dlq?queue=${queue}&errorContains=address&count=true&limit=50`]) {
    const t0 = performance.now();
    await getJSON(path);
    console.log(`# GET /api/${path.replace(queue, 'Q')}: ${(performance.now() - t0).toFixed(0)} ms`);
  }

  // The errors, counted; "Show these" filters the page by one.
  const page = await visit(`/dlq?queue=${queue}`);
  await page.waitForSelector('#dlq-errors[data-ready=true]');
  const rows = await page.$$eval('#dlq-errors tbody tr[data-error]', (trs) => trs.map((tr) => [tr.dataset.error, tr.querySelector('[data-col=count]').dataset.value]));
  assert.deepEqual(rows, [['card declined', '7500'], ['address invalid', '2500']]);
  await waitValue(page, '#dlq-count', DEAD, { attr: 'count' });
  await page.click('#dlq-errors tr[data-error="address invalid"] button');
  await waitValue(page, '#dlq-count', 2500, { attr: 'count' });
  assert.equal(await page.$eval('#dlq-error', (i) => i.value), 'address invalid');
  assert.match(await text(page, '#dlq-replay-all'), /Replay all matching \(2,500\)/);

  // Replay everything matching: the confirmation states the count.
  await page.click('#dlq-replay-all');
  assert.match(await answerConfirm(page), /Replay 2,500 dead letters/);
  let since = Date.now();
  await waitValue(page, '#dlq-bulk-status', 'true', { attr: 'finished', timeout: 60_000 });
  console.log(`# 2,500 replayed by filter from the page in ${((Date.now() - since) / 1000).toFixed(1)} s`);
  assert.match(await text(page, '#dlq-bulk-status'), /Done\. Replayed 2,500 · skipped 0 as replayed already · failed 0/);
  assert.equal((await count(queue, '&errorContains=address')).replayedCount, 2500);
  assert.equal(await stored(queue), DEAD + 2500);

  // The whole queue: 7,500 left to replay; stopped after the first batch.
  await page.evaluate(() => { location.hash = location.hash.replace(/&error=[^&]*/, '').replace(/&group=[^&]*/, ''); });
  await waitValue(page, '#dlq-count', DEAD, { attr: 'count' });
  await page.click('#dlq-replay-all');
  assert.match(await answerConfirm(page), /Replay 7,500 dead letters.*2,500 replayed already will be skipped/s);
  await page.click('#dlq-stop');
  await waitValue(page, '#dlq-bulk-status', 'false', { attr: 'finished', timeout: 60_000 });
  assert.match(await text(page, '#dlq-bulk-status'), /^Stopped/);
  const halfway = (await count(queue)).replayedCount;
  assert.ok(halfway > 2500 && halfway < DEAD, `stopped with ${halfway} replayed`);
  assert.equal(await stored(queue), DEAD + halfway);

  // Started again: each dead letter ends replayed exactly once.
  await waitValue(page, '#dlq-count', halfway, { attr: 'replayed' });
  await page.click('#dlq-replay-all');
  assert.match(await answerConfirm(page), new RegExp(`Replay ${(DEAD - halfway).toLocaleString('en-US')} dead letters`));
  since = Date.now();
  await waitValue(page, '#dlq-bulk-status', 'true', { attr: 'finished', timeout: 60_000 });
  console.log(`# the rest, ${DEAD - halfway} replayed and ${halfway} skipped, in ${((Date.now() - since) / 1000).toFixed(1)} s`);
  assert.match(await text(page, '#dlq-bulk-status'), new RegExp(`Replayed ${(DEAD - halfway).toLocaleString('en-US')} · skipped ${halfway.toLocaleString('en-US')}`));
  assert.equal((await count(queue)).replayedCount, DEAD);
  assert.equal(await stored(queue), 2 * DEAD, 'every dead letter replayed once');
  await page.waitForSelector('#dlq-errors tr[data-error="card declined"] [data-col=replayed][data-value="7500"]');
  await finish(page, 'dlq-bulk');
});

test('deleting by filter and the selected ones, each after a confirmation of the count', async () => {
  const queue = uniqueQueue('gone');
  await fillDeadLetters(queue, 1000);
  const page = await visit(`/dlq?queue=${queue}&error=address`);
  await waitValue(page, '#dlq-count', 250, { attr: 'count' });
  await page.click('#dlq-delete-all');
  assert.match(await answerConfirm(page), /Delete 250 dead letters/);
  await waitValue(page, '#dlq-bulk-status', 'true', { attr: 'finished', timeout: 30_000 });
  assert.match(await text(page, '#dlq-bulk-status'), /Deleted 250/);
  await waitValue(page, '#dlq-count', 0, { attr: 'count' });
  assert.equal((await count(queue)).count, 750);

  await page.evaluate(() => { location.hash = location.hash.replace(/&error=[^&]*/, ''); });
  await waitValue(page, '#dlq-count', 750, { attr: 'count' });
  const ids = await page.$$eval('#dlq-table tbody tr[data-id]', (trs) => trs.slice(0, 3).map((tr) => Number(tr.dataset.id)));
  for (const id of ids) await page.click(`#dlq-table tr[data-id="${id}"] input[type=checkbox]`);
  await page.click('#dlq-delete');
  assert.match(await answerConfirm(page), /Delete 3 dead letters/);
  await waitValue(page, '#dlq-count', 747, { attr: 'count' });
  const left = (await getJSON(`dlq?queue=${queue}&limit=500`)).entries.map((e) => e.id);
  assert.ok(ids.every((id) => !left.includes(id)), 'the selected ones are gone');
  await finish(page);
});
