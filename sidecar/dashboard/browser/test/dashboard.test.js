// The operator dashboard in a real browser (headless Chromium) against a
// real sidecar with its own PostgreSQL; messages go through the Node client.
// Every test fails on any console error, uncaught exception, failed request
// or HTTP error other than the 403s it expects, and saves a 1280x800
// screenshot of its page into $QUEENSIDE_SCREENSHOTS (else a temporary
// directory).
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { completed, failed, startReadOnlySidecar, uniqueQueue } from '../harness.js';
import { finishPage, openPage, text, waitValue } from '../browser.js';
import { closeSuite, openSuite } from '../suite.js';

let sidecar;
let client;
let browser;
let shots;
let traffic;

/** Background pushes and consumption, so that rates and charts show something. */
function startTraffic(queue) {
  const stop = new AbortController();
  const loop = async (fn, everyMs) => {
    while (!stop.signal.aborted) {
      try {
        await fn();
      } catch {
        // stopping: the client may be closing
      }
      await new Promise((r) => setTimeout(r, everyMs));
    }
  };
  let n = 0;
  const done = Promise.all([
    loop(() => client.push(Array.from({ length: 8 }, () => ({ queue, partition: `zone-${n++ % 4}`, payload: { n } }))), 200),
    loop(() => client.pop(queue, { group: 'workers', batch: 5, autoAck: true, waitMs: 100 }), 250),
  ]);
  return async () => {
    stop.abort();
    await done;
  };
}

before(async () => {
  ({ sidecar, client, browser, shots } = await openSuite());
  traffic = startTraffic('traffic');
});

after(async () => {
  if (traffic) await traffic();
  await closeSuite({ sidecar, client, browser, shots });
});

async function visit(route) {
  const page = await openPage(browser);
  await page.goto(`${sidecar.url}#${route}`, { waitUntil: 'load' });
  return page;
}

/** For `make screenshots`: let the live charts gather a few readings first. */
async function settle() {
  if (process.env.QUEENSIDE_SCREENSHOTS) await new Promise((r) => setTimeout(r, 8000));
}

const finish = (page, shot) => finishPage(page, shots, shot);

/** Marks the document, to prove later that the page was not reloaded. */
const mark = (page) => page.evaluate(() => {
  window.__queensideMark = 'same document';
});
const marked = (page) => page.evaluate(() => window.__queensideMark === 'same document');

/** Keeps the admin token in the page's tab, as the token dialog does. */
const keepToken = (page) => page.evaluate((t) => sessionStorage.setItem('queenside.token', t), sidecar.token);

/** Waits for the confirmation dialog, answers it, and returns what it said. */
async function answerConfirm(page, answer = 'ok') {
  await page.waitForSelector('#confirm-dialog[open]');
  const said = await text(page, '#confirm-dialog');
  await page.click(answer === 'ok' ? '#confirm-ok' : '#confirm-cancel');
  await page.waitForSelector('#confirm-dialog:not([open])');
  return said;
}

/** A write straight to the API with the token: the tests' own clean-up. */
async function adminPost(path, body) {
  const res = await fetch(`${sidecar.url}api/${path}`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${sidecar.token}`, 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
  });
  const got = await res.text();
  assert.equal(res.status, 200, `POST ${path}: ${got}`);
  return JSON.parse(got);
}

const getJSON = async (path) => (await fetch(`${sidecar.url}api/${path}`)).json();

test('the queues page shows a pushed queue with its counts, and its rate live', async () => {
  const q = uniqueQueue('orders');
  await client.push(['eu', 'us', 'apac'].flatMap((partition) => Array.from({ length: 10 }, (_, i) => ({ queue: q, partition, payload: { i } }))));
  await client.configure(q, { retryLimit: 5, leaseSeconds: 30, maxDeliveries: 4 });
  const page = await visit('/queues');
  const row = `#queues-table tr[data-queue="${q}"]`;
  await page.waitForSelector(row);
  await waitValue(page, `${row} [data-col=partitions]`, 3);
  await waitValue(page, `${row} [data-col=messages]`, 30);
  await waitValue(page, `${row} [data-col=pushed]`, 30);
  assert.equal(await text(page, `${row} a`), q);
  assert.equal(await page.$eval(`${row} a`, (a) => a.getAttribute('href')), `#/queues/${q}`);
  assert.match(await text(page, `${row} .options`), /lease 30 s · retries 5 .* · max deliveries 4$/);
  assert.equal(await text(page, `${row} [data-col=messages]`), '30');

  await mark(page);
  await client.push(Array.from({ length: 20 }, (_, i) => ({ queue: q, partition: 'eu', payload: { more: i } })));
  await waitValue(page, `${row} [data-col=pushed]`, 50);
  await waitValue(page, `${row} [data-col=messages]`, 50);
  await page.waitForFunction((sel) => Number(document.querySelector(sel)?.dataset.value) > 0, { timeout: 10_000 }, `${row} [data-col=pushedRate]`);
  assert.ok(await marked(page), 'the counts and the rate changed without a reload');
  await page.waitForSelector('#queues-chart canvas');
  // the traffic queue is consumed: its consumed/s shows
  await page.waitForFunction(() => Number(document.querySelector('#queues-table tr[data-queue="traffic"] [data-col=consumedRate]')?.dataset.value) > 0, { timeout: 10_000 });
  await settle();
  await finish(page, 'queues');
});

test('the queue page shows a group\'s lag, and the lag falls live after acks', async () => {
  const q = uniqueQueue('billing');
  await client.push(['a', 'b'].flatMap((partition) => Array.from({ length: 20 }, (_, i) => ({ queue: q, partition, payload: { partition, i } }))));
  const popped = await client.pop(q, { group: 'billing', batch: 10 });
  assert.equal(popped.messages.length, 10);
  const leasedPartition = popped.messages[0].partition;

  const page = await visit(`/queues/${encodeURIComponent(q)}`);
  const group = '#groups-table tr[data-group="billing"]';
  await page.waitForSelector(group);
  await waitValue(page, `${group} [data-col=lag]`, 40);
  await waitValue(page, `${group} [data-col=leased]`, 1);
  assert.match(await text(page, `${group} [data-col=oldest]`), /ago$/);
  const partRow = `#partitions-table tr[data-partition="${leasedPartition}"]`;
  await page.waitForSelector(partRow);
  assert.equal(await text(page, `${partRow} [data-col=head]`), '20');
  assert.match(await text(page, `${partRow} li[data-group="billing"]`), /cursor 0 · lag 20\s+leased until/);

  await mark(page);
  await client.ack(popped.messages.map(completed));
  await waitValue(page, `${group} [data-col=lag]`, 30);
  await waitValue(page, `${group} [data-col=leased]`, 0);
  await page.waitForFunction((sel) => /cursor 10 · lag 10/.test(document.querySelector(sel)?.textContent ?? ''), { timeout: 10_000 }, `${partRow} li[data-group="billing"]`);
  assert.ok(await marked(page), 'the lag fell without a reload');
  await page.waitForSelector('#lag-chart canvas');
  assert.match(await text(page, '#lag-chart .u-legend'), /billing/);
  await settle();
  await finish(page, 'queue');
});

test('the partitions table pages forward and back and filters by prefix', async () => {
  const q = uniqueQueue('wide');
  const names = Array.from({ length: 260 }, (_, i) => `p-${String(i).padStart(3, '0')}`);
  await client.push(names.map((partition) => ({ queue: q, partition, payload: partition })));
  const page = await visit(`/queues/${encodeURIComponent(q)}`);
  const requested = [];
  page.on('request', (req) => {
    if (req.url().includes('/partitions')) requested.push(new URL(req.url()));
  });
  const shown = () => page.$$eval('#partitions-table tbody tr', (trs) => trs.map((tr) => tr.dataset.partition));
  const waitFirst = (name, count) => page.waitForFunction((n, c) => {
    const rows = document.querySelectorAll('#partitions-table tbody tr');
    return rows.length === c && rows[0].dataset.partition === n;
  }, { timeout: 10_000 }, name, count);

  await waitFirst('p-000', 100);
  assert.deepEqual(await shown(), names.slice(0, 100));
  assert.equal(await page.$eval('#partitions-prev', (b) => b.disabled), true);
  await page.click('#partitions-next');
  await waitFirst('p-100', 100);
  assert.deepEqual(await shown(), names.slice(100, 200));
  await page.click('#partitions-next');
  await waitFirst('p-200', 60);
  assert.deepEqual(await shown(), names.slice(200));
  assert.equal(await page.$eval('#partitions-next', (b) => b.disabled), true, 'no page after the last');
  assert.match(await text(page, '#partitions-page'), /^Page 3/);
  await page.click('#partitions-prev');
  await waitFirst('p-100', 100);

  await page.type('#partition-prefix', 'p-25');
  await waitFirst('p-250', 10);
  assert.deepEqual(await shown(), names.slice(250, 260));
  await page.select('#partition-limit', '250');
  await page.click('#partition-prefix', { clickCount: 3 });
  await page.keyboard.press('Backspace');
  await waitFirst('p-000', 250);

  assert.ok(requested.length > 0);
  for (const u of requested) {
    const limit = Number(u.searchParams.get('limit'));
    assert.ok(limit >= 1 && limit <= 500, `every partitions request asks for one page: ${u}`);
  }
  await finish(page);
});

test('a dead letter: its payload is readable, replay is refused without the token and done with it', async () => {
  const q = uniqueQueue('payments');
  await client.configure(q, { retryLimit: 1 });
  const payload = { order: 7, item: 'blue widget', amount: 12.5, tags: ['gift', 'express'] };
  await client.push({ queue: q, partition: 'eu', payload, transactionId: 'order-7' });
  let acked;
  for (let i = 0; i < 2; i++) { // retryLimit + 1 failures
    const { messages } = await client.pop(q, { group: 'billing', batch: 1, waitMs: 5000 });
    assert.equal(messages.length, 1);
    acked = await client.ack(failed(messages[0], 'card declined'));
  }
  assert.equal(acked.results[0].deadLettered, true);

  const page = await visit(`/dlq?queue=${encodeURIComponent(q)}`);
  const row = '#dlq-table tbody tr[data-id]';
  await page.waitForSelector(row);
  assert.equal((await page.$$(row)).length, 1);
  const id = await page.$eval(row, (tr) => tr.dataset.id);
  const rowText = await text(page, row);
  assert.match(rowText, new RegExp(`${q} / eu`));
  assert.match(rowText, /card declined/);
  assert.equal(await page.$eval(`${row} [data-col=replayed]`, (td) => td.dataset.value), '');

  // the payload, expanded
  await page.click(`${row} summary`);
  await page.waitForSelector(`${row} pre.payload-full`, { visible: true });
  assert.deepEqual(JSON.parse(await text(page, `${row} pre.payload-full`)), payload);

  // refused without the token: the 403 is shown
  page.allow403(/\/api\/dlq\/replay$/);
  page.allow403(/\/api\/auth$/);
  await page.click(`${row} input[type=checkbox]`);
  await page.click('#dlq-replay');
  await page.waitForSelector('#dlq-status.error');
  assert.match(await text(page, '#dlq-status'), /403 forbidden/);
  assert.equal(await page.$eval(`${row} [data-col=replayed]`, (td) => td.dataset.value), '');

  // a wrong token is refused by the check, the right one kept
  await page.click('#token-button');
  await page.waitForSelector('#token-dialog[open]');
  await page.type('#token-input', 'not-the-admin-token-at-all');
  await page.click('#token-save');
  await page.waitForSelector('#token-status.error');
  assert.match(await text(page, '#token-status'), /403 forbidden/);
  await page.click('#token-input', { clickCount: 3 });
  await page.type('#token-input', sidecar.token);
  await page.click('#token-save');
  await page.waitForSelector('#token-dialog:not([open])');
  assert.equal(await page.$eval('#token-button', (b) => b.dataset.state), 'set');

  // replayed with it
  await page.click('#dlq-replay');
  await page.waitForSelector(`#dlq-replay-results li[data-id="${id}"]`);
  assert.equal(await page.$eval(`#dlq-replay-results li[data-id="${id}"]`, (li) => li.dataset.status), 'queued');
  const result = await text(page, `#dlq-replay-results li[data-id="${id}"]`);
  const offset = Number(/as offset (\d+)/.exec(result)?.[1]);
  assert.equal(offset, 1, result);
  await page.waitForFunction((sel) => document.querySelector(sel)?.dataset.value !== '', { timeout: 10_000 }, `${row} [data-col=replayed]`);
  assert.ok(!Number.isNaN(Date.parse(await page.$eval(`${row} [data-col=replayed]`, (td) => td.dataset.value))), 'replayedAt is a time');

  // the message is poppable again
  const again = await client.pop(q, { group: 'billing', batch: 1, waitMs: 5000 });
  assert.equal(again.messages.length, 1);
  assert.equal(again.messages[0].offset, offset);
  assert.deepEqual(again.messages[0].payload, payload);
  await client.ack(completed(again.messages[0]));

  // the open payload for the screenshot, and the token never in the console
  await page.click(`${row} summary`).catch(() => {});
  await page.evaluate((sel) => {
    document.querySelector(sel).open = true;
  }, `${row} details`);
  assert.ok(!page.consoleTexts.some((t) => t.includes(sidecar.token)), 'the token is never logged');
  await finish(page, 'dlq');
});

test('writes on a sidecar without --admin-token-file are refused and say why', async () => {
  const readonly = await startReadOnlySidecar(sidecar);
  try {
    const q = uniqueQueue('seekme');
    await client.push({ queue: q, payload: 1 });
    await client.pop(q, { group: 'g1', batch: 1, autoAck: true });
    const page = await openPage(browser);
    page.allow403(/\/seek$/);
    page.allow403(/\/pause$/);
    await page.goto(`${readonly.url}#/queues/${encodeURIComponent(q)}`);
    assert.equal(await text(page, '#token-button'), 'Writes disabled');
    await page.waitForSelector('#seek-group option[value="g1"]');
    await page.select('#seek-to', 'beginning');
    await page.click('#seek-form button[type=submit]');
    await page.waitForSelector('#seek-status.error');
    assert.match(await text(page, '#seek-status'), /403 writes_disabled.*without --admin-token-file/);
    await page.click('#pause-toggle');
    await answerConfirm(page);
    await page.waitForSelector('#pause-status.error');
    assert.match(await text(page, '#pause-status'), /403 writes_disabled.*without --admin-token-file/);
    assert.equal(await page.$('#queue-badges [data-badge=paused]'), null, 'not paused');
    await finish(page);
  } finally {
    await readonly.stop();
  }
});

test('seek with the token moves the group\'s cursors', async () => {
  const q = uniqueQueue('rewind');
  await client.push(Array.from({ length: 5 }, (_, i) => ({ queue: q, partition: 'only', payload: i })));
  await client.pop(q, { group: 'replayers', batch: 5, autoAck: true });
  const page = await visit(`/queues/${encodeURIComponent(q)}`);
  await page.evaluate((t) => sessionStorage.setItem('queenside.token', t), sidecar.token);
  const group = '#groups-table tr[data-group="replayers"]';
  await waitValue(page, `${group} [data-col=lag]`, 0);
  await page.select('#seek-to', 'beginning');
  await page.click('#seek-form button[type=submit]');
  await page.waitForSelector('#seek-status.ok');
  assert.match(await text(page, '#seek-status'), /Moved 1 cursor of group replayers to beginning/);
  await waitValue(page, `${group} [data-col=lag]`, 5);
  await finish(page);
});

test('the spool page shows the spool as the API reports it', async () => {
  const page = await visit('/spool');
  await page.waitForSelector('[data-stat=records]');
  const api = await (await fetch(`${sidecar.url}api/spool`)).json();
  assert.equal(api.enabled, true);
  await waitValue(page, '[data-stat=records]', api.records);
  await waitValue(page, '[data-stat=replayed]', api.replayed);
  assert.equal(await page.$eval('#spool-disabled', (p) => p.hidden), true);
  assert.match(await text(page, '[data-stat=database] .stat-value'), /^up$/);
  assert.match(await text(page, '[data-stat=replaying] .stat-value'), /^(no|yes)$/);
  assert.match(await text(page, '#spool-quarantined'), api.quarantined.length ? new RegExp(api.quarantined[0]) : /None/);
  await page.waitForSelector('#spool-chart canvas');
  await finish(page, 'spool');
});

test('the cluster page lists this sidecar, the database and its health', async () => {
  const info = await (await fetch(`${sidecar.url}api/info`)).json();
  const cluster = await (await fetch(`${sidecar.url}api/cluster`)).json();
  const page = await visit('/cluster');
  await page.waitForSelector('#sidecars-table tr.self');
  assert.match(await page.$eval('#sidecars-table tr.self', (tr) => tr.dataset.sidecar), new RegExp(info.sidecarId));
  assert.match(await text(page, '#sidecars-table tr.self'), /this sidecar/);
  assert.match(await text(page, '[data-stat=database] .stat-value'), /^ok$/);
  assert.match(await text(page, '[data-stat=latency] .stat-value'), /^\d+\.\d\d ms$/);
  assert.match(await text(page, '[data-stat=health] .stat-value'), /^ok$/);
  assert.match(await text(page, '#cluster-database'), new RegExp(`Server version${cluster.database.serverVersion.split(' ')[0]}`));
  assert.equal(await page.$('#maintenance-card') !== null, cluster.maintenance !== undefined, 'maintenance shows only when reported');
  await page.waitForSelector('#latency-chart canvas');
  await finish(page, 'cluster');
});

test('pausing a queue from its page: refused without the token; with it, its pops deliver nothing until resumed', async () => {
  const q = uniqueQueue('pausable');
  const other = uniqueQueue('unpaused');
  await client.push([
    ...Array.from({ length: 3 }, (_, i) => ({ queue: q, partition: 'p', payload: i })),
    { queue: other, payload: 'still delivered' },
  ]);
  const page = await visit(`/queues/${encodeURIComponent(q)}`);
  page.allow403(/\/api\/queues\/[^/]+\/pause$/);
  const pauseRequests = [];
  page.on('request', (req) => {
    if (req.url().endsWith('/pause')) pauseRequests.push(req.postData());
  });
  await page.waitForSelector('#pause-toggle:not([disabled])');
  assert.match(await text(page, '#pause-state'), /running/);
  assert.equal(await text(page, '#pause-toggle'), 'Pause consumption');

  // Cancel in the confirmation sends nothing
  await page.click('#pause-toggle');
  await answerConfirm(page, 'cancel');
  assert.deepEqual(pauseRequests, []);

  // without the token: confirmed, refused, shown, nothing changed
  await page.click('#pause-toggle');
  assert.match(await answerConfirm(page), /No consumer group's pop will deliver/);
  await page.waitForSelector('#pause-status.error');
  assert.match(await text(page, '#pause-status'), /403 forbidden.*admin token/);
  assert.equal((await getJSON(`queues/${q}`)).options.consumptionPaused, false);
  assert.equal(await page.$('#queue-badges [data-badge=paused]'), null);

  // with it: paused, the badge shows, pops of this queue deliver nothing
  await keepToken(page);
  await page.click('#pause-toggle');
  await answerConfirm(page);
  await page.waitForSelector('#pause-status.ok');
  await page.waitForSelector('#queue-badges [data-badge=paused]');
  assert.match(await text(page, '#pause-state'), /paused/);
  assert.equal(await text(page, '#pause-toggle'), 'Resume consumption');
  assert.deepEqual(pauseRequests.map((b) => JSON.parse(b)), [{ paused: true }, { paused: true }]);
  assert.equal((await getJSON(`queues/${q}`)).options.consumptionPaused, true);
  const none = await client.pop(q, { group: 'workers', batch: 10, waitMs: 300 });
  assert.equal(none.messages.length, 0);
  assert.equal(none.paused, true);
  const delivered = await client.pop(other, { group: 'workers', batch: 10, waitMs: 1000, autoAck: true });
  assert.equal(delivered.messages.length, 1, 'another queue still delivers');

  // the badge stays after a refresh, and the queues page shows it on this queue only
  await new Promise((r) => setTimeout(r, 2500));
  assert.notEqual(await page.$('#queue-badges [data-badge=paused]'), null);
  await page.evaluate(() => { location.hash = '#/queues'; });
  await page.waitForSelector(`#queues-table tr[data-queue="${q}"] [data-badge=paused]`);
  await page.waitForSelector(`#queues-table tr[data-queue="${other}"]`);
  assert.equal(await page.$(`#queues-table tr[data-queue="${other}"] [data-badge=paused]`), null);

  // resumed (no confirmation needed): the badge goes, pops deliver again
  await page.evaluate((hash) => { location.hash = hash; }, `#/queues/${encodeURIComponent(q)}`);
  await page.waitForFunction(() => document.querySelector('#pause-toggle')?.textContent === 'Resume consumption' && !document.querySelector('#pause-toggle').disabled, { timeout: 10_000 });
  await page.click('#pause-toggle');
  await page.waitForSelector('#pause-status.ok');
  assert.match(await text(page, '#pause-status'), /resumed/);
  assert.equal(await page.$('#queue-badges [data-badge=paused]'), null);
  assert.match(await text(page, '#pause-state'), /running/);
  const again = await client.pop(q, { group: 'workers', batch: 10, waitMs: 1000, autoAck: true });
  assert.equal(again.messages.length, 3);
  await finish(page);
});

test('pop maintenance from the cluster page: pops deliver nothing while it is on, acks keep working', async () => {
  const q = uniqueQueue('popmaint');
  await client.push(Array.from({ length: 2 }, (_, i) => ({ queue: q, payload: i })));
  const leased = await client.pop(q, { group: 'workers', batch: 1 }); // acked during maintenance
  assert.equal(leased.messages.length, 1);
  const page = await visit('/cluster');
  page.allow403(/\/api\/maintenance$/);
  const popState = '.maintenance-state[data-maintenance=pop]';
  try {
    await waitValue(page, popState, 'false', { attr: 'on' });
    assert.equal(await text(page, '#maintenance-pop-toggle'), 'Turn pop maintenance on');
    assert.match(await text(page, '#maintenance-card'), /pops deliver nothing.*acks keep working/i);

    // without the token: refused and still off
    await page.click('#maintenance-pop-toggle');
    await answerConfirm(page);
    await page.waitForSelector('#maintenance-status.error');
    assert.match(await text(page, '#maintenance-status'), /403 forbidden/);
    assert.equal((await getJSON('cluster')).maintenance.pop, false);

    // with it: on, with its since-time, and the banner says so
    await keepToken(page);
    await page.click('#maintenance-pop-toggle');
    assert.match(await answerConfirm(page), /Pops deliver nothing on every sidecar.*acks keep working/);
    await waitValue(page, popState, 'true', { attr: 'on' });
    assert.match(await text(page, popState), /^on since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC/);
    assert.equal(await text(page, '#maintenance-pop-toggle'), 'Turn pop maintenance off');
    await page.waitForSelector('#maintenance-banner:not([hidden]) [data-maintenance=pop]');
    assert.match(await text(page, '#maintenance-banner'), /Pop maintenance since .* UTC: pops deliver nothing, acks keep working/);
    assert.ok((await getJSON('cluster')).maintenance.popSince);
    await page.screenshot({ path: join(shots, 'maintenance.png') });

    const none = await client.pop(q, { group: 'workers', batch: 10, waitMs: 300 });
    assert.equal(none.messages.length, 0);
    assert.equal(none.paused, true);
    const acked = await client.ack(completed(leased.messages[0]));
    assert.equal(acked.results.length, 1);
    assert.ok(!acked.results[0].error, `the ack worked: ${JSON.stringify(acked.results[0])}`);

    // any other page shows the banner too
    const other = await visit('/dlq');
    await other.waitForSelector('#maintenance-banner:not([hidden]) [data-maintenance=pop]');
    await finish(other);

    // off (no confirmation needed): pops deliver again
    await page.click('#maintenance-pop-toggle');
    await waitValue(page, popState, 'false', { attr: 'on' });
    await page.waitForSelector('#maintenance-banner[hidden]');
    const again = await client.pop(q, { group: 'workers', batch: 10, waitMs: 1000, autoAck: true });
    assert.equal(again.messages.length, 1);
    assert.equal(again.messages[0].payload, 1);
  } finally {
    await adminPost('maintenance', { pop: false });
  }
  await finish(page);
});

test('push maintenance from the cluster page: pushes are spooled, and replayed when it is turned off', async () => {
  const q = uniqueQueue('pushmaint');
  const before = await getJSON('spool');
  const page = await visit('/cluster');
  const pushState = '.maintenance-state[data-maintenance=push]';
  let spool;
  try {
    await waitValue(page, pushState, 'false', { attr: 'on' });
    await keepToken(page);
    await page.click('#maintenance-push-toggle');
    assert.match(await answerConfirm(page), /Every sidecar spools pushes to its disk instead of storing them/);
    await waitValue(page, pushState, 'true', { attr: 'on' });
    assert.match(await text(page, pushState), /^on since /);

    const [result] = await client.push({ queue: q, partition: 'p', payload: { spooled: true } });
    assert.equal(result.status, 'buffered');

    // the spool page holds it, under the banner
    spool = await visit('/spool');
    await spool.waitForFunction(() => Number(document.querySelector('[data-stat=records]')?.dataset.value) > 0, { timeout: 10_000 });
    await spool.waitForSelector('#maintenance-banner:not([hidden]) [data-maintenance=push]');
    assert.match(await text(spool, '#maintenance-banner'), /every sidecar spools pushes instead of storing them/);
    // it says why pushes are spooled, and counts them by cause
    await spool.waitForSelector('#spool-cause [data-cause=maintenance]');
    assert.match(await text(spool, '#spool-cause'), /push maintenance is on/);
    await spool.waitForFunction((n) => Number(document.querySelector('[data-spooled=maintenance]')?.dataset.value) > n,
      { timeout: 10_000 }, (before.spooled || {}).maintenance || 0);

    // a click in a background tab never lands: the cluster page comes first again
    await page.bringToFront();
    await page.click('#maintenance-push-toggle');
    await waitValue(page, pushState, 'false', { attr: 'on' });
  } finally {
    await adminPost('maintenance', { push: false });
  }
  await finish(page);

  // replayed: the spool empties, and the message is poppable
  await spool.bringToFront();
  await waitValue(spool, '[data-stat=records]', 0);
  await spool.waitForFunction((n) => Number(document.querySelector('[data-stat=replayed]')?.dataset.value) > n, { timeout: 10_000 }, before.replayed);
  await spool.waitForSelector('#maintenance-banner[hidden]');
  await spool.waitForFunction(() => !document.querySelector('#spool-cause [data-cause]'), { timeout: 10_000 });
  const popped = await client.pop(q, { group: 'workers', batch: 10, waitMs: 5000, autoAck: true });
  assert.equal(popped.messages.length, 1);
  assert.deepEqual(popped.messages[0].payload, { spooled: true });
  await finish(spool);
});
