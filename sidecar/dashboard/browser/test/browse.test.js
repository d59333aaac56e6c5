// The message browser in a real browser (headless Chromium) against a real
// sidecar, on a partition of 1,000,000 messages pushed through the Node
// client: the newest page, from an offset, from a time, by transaction id,
// a payload read whole, and a group's cursor and lease on the rows. Each
// test fails on any console error, uncaught exception, failed request or
// HTTP error; the page and API times are printed for the record.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { performance } from 'node:perf_hooks';
import { completed, pushMany } from '../harness.js';
import { finishPage, openPage, text, waitValue } from '../browser.js';
import { closeSuite, openSuite } from '../suite.js';

const QUEUE = 'browse';
const PARTITION = 'orders/eu';
const MESSAGES = Number(process.env.BROWSE_MESSAGES || 1_000_000);
const BATCH = 2000; // items a push
const IN_FLIGHT = 8; // pushes at once, over CLIENTS connections
const CLIENTS = 4;
const ROUTE = `/queues/${QUEUE}/partitions/${encodeURIComponent(PARTITION)}`;
const API = `api/queues/${QUEUE}/partitions/${encodeURIComponent(PARTITION)}/messages`;

let sidecar;
let client;
let browser;
let shots;

const txid = (i) => `order-${i}`;
const ms = (t) => `${t.toFixed(0)} ms`;

/** 1,000,000 messages into one partition, big batches, several in flight. */
async function fill() {
  const started = performance.now();
  await pushMany(sidecar.socket, MESSAGES, (i) => ({
    queue: QUEUE, partition: PARTITION, transactionId: txid(i), traceId: `trace-${i}`, headers: { region: 'eu' }, payload: { i, sku: `sku-${i % 97}` },
  }), { batch: BATCH, inFlight: IN_FLIGHT, clients: CLIENTS });
  const seconds = (performance.now() - started) / 1000;
  console.log(`# filled ${MESSAGES.toLocaleString('en-US')} messages into one partition in ${seconds.toFixed(1)} s (${Math.round(MESSAGES / seconds).toLocaleString('en-US')}/s; batches of ${BATCH}, ${IN_FLIGHT} in flight)`);
}

before(async () => {
  ({ sidecar, client, browser, shots } = await openSuite());
  await fill();
});

after(async () => {
  await closeSuite({ sidecar, client, browser, shots });
});

const finish = (page, shot) => finishPage(page, shots, shot);

const getJSON = async (path) => {
  const res = await fetch(`${sidecar.url}${path}`);
  const body = await res.json();
  assert.equal(res.status, 200, `${path}: ${JSON.stringify(body)}`);
  return body;
};

/** Median and max of n calls of an API path, from Node. */
async function timeApi(path, n = 5) {
  const times = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await getJSON(path);
    times.push(performance.now() - t0);
  }
  times.sort((a, b) => a - b);
  return `${ms(times[Math.floor(n / 2)])} median, ${ms(times[n - 1])} max`;
}

/** The offsets of the rows shown. */
const rowOffsets = (page) => page.$$eval('#messages-table tbody tr[data-offset]', (rows) => rows.map((r) => Number(r.dataset.offset)));

/** Submits the form with a mode and a value, and waits for the page from `from`. */
async function show(page, mode, value) {
  await page.select('#browse-mode', mode);
  await page.$eval('#browse-value', (el, v) => {
    el.value = v;
  }, value);
  const t0 = performance.now();
  await page.click('#browse-go');
  return t0;
}

const waitFirstRow = (page, offset) => page.waitForFunction(
  (o) => document.querySelector('#messages-table tbody tr')?.dataset.offset === String(o), { timeout: 30_000 }, offset);

test('the newest page of a partition of 1,000,000 messages, reached from the queue page', async () => {
  console.log(`# API newest page of 50: ${await timeApi(API)}`);
  console.log(`# API page of 500 from offset 500,000: ${await timeApi(`${API}?from=500000&limit=500`)}`);
  console.log(`# API one message whole: ${await timeApi(`${API}/765432`)}`);

  const page = await openPage(browser);
  const t0 = performance.now();
  await page.goto(`${sidecar.url}#${ROUTE}`);
  await page.waitForSelector(`#messages-table tbody tr[data-offset="${MESSAGES - 1}"]`);
  console.log(`# page: the newest 50 on screen ${ms(performance.now() - t0)} after navigation`);
  assert.deepEqual(await rowOffsets(page), Array.from({ length: 50 }, (_, i) => MESSAGES - 50 + i));
  assert.equal(await text(page, '[data-stat=head] .stat-value'), MESSAGES.toLocaleString('en-US'));
  assert.equal(await text(page, '[data-stat=messages] .stat-value'), MESSAGES.toLocaleString('en-US'));
  // Pushes run side by side, so an item's offset is not its number: each
  // row shows one item's transaction id, trace id, headers and payload.
  const last = `#messages-table tr[data-offset="${MESSAGES - 1}"]`;
  const n = Number(/^order-(\d+)$/.exec(await text(page, `${last} td:nth-of-type(1)`))[1]);
  assert.equal(await text(page, `${last} td:nth-of-type(3)`), `trace-${n}`);
  assert.equal(await text(page, `${last} td:nth-of-type(4)`), 'region eu');
  assert.match(await text(page, `${last} .payload summary`), new RegExp(`^msgpack \\{"i":${n},"sku":"sku-${n % 97}"\\} \\d+ B$`));
  assert.equal(await page.$eval('#browse-newer', (b) => b.disabled), true);

  // From the queue page, the partition's row leads here.
  await page.goto(`${sidecar.url}#/queues/${QUEUE}`);
  const link = `#partitions-table tr[data-partition="${PARTITION}"] a`;
  await page.waitForSelector(link);
  await page.click(link);
  await page.waitForSelector(`#messages-table tbody tr[data-offset="${MESSAGES - 1}"]`);
  assert.equal(await page.evaluate(() => location.hash), `#${ROUTE}`);
  await finish(page);
});

test('pages from an offset, older and newer, without reloading; the address keeps the view', async () => {
  const page = await openPage(browser);
  await page.goto(`${sidecar.url}#${ROUTE}`);
  await page.waitForSelector('#messages-table tbody tr[data-offset]');
  await page.evaluate(() => {
    window.__mark = 'same document';
  });
  let t0 = await show(page, 'from', '500000');
  await waitFirstRow(page, 500000);
  console.log(`# page: from offset 500,000 on screen ${ms(performance.now() - t0)} after the click`);
  assert.deepEqual(await rowOffsets(page), Array.from({ length: 50 }, (_, i) => 500000 + i));
  assert.equal(await page.evaluate(() => location.hash), `#${ROUTE}?from=500000`);
  t0 = performance.now();
  await page.click('#browse-newer');
  await waitFirstRow(page, 500050);
  console.log(`# page: newer page on screen ${ms(performance.now() - t0)} after the click`);
  await page.click('#browse-older');
  await waitFirstRow(page, 500000);
  await page.click('#browse-older');
  await waitFirstRow(page, 499950);
  await page.click('#browse-newest');
  await waitFirstRow(page, MESSAGES - 50);
  assert.equal(await page.evaluate(() => window.__mark), 'same document');
  // Past the head: an empty page that says so.
  await show(page, 'from', String(MESSAGES + 5));
  await page.waitForFunction(() => /the head offset is/.test(document.querySelector('#browse-note').textContent));
  assert.deepEqual(await rowOffsets(page), []);
  // The address opens the same view.
  await page.goto(`${sidecar.url}#${ROUTE}?from=250000&limit=20`);
  await page.reload();
  await waitFirstRow(page, 250000);
  assert.equal((await rowOffsets(page)).length, 20);
  await finish(page);
});

test('pages from a time', async () => {
  const probe = await getJSON(`${API}?from=300000&limit=1`);
  const at = probe.messages[0].committedAt;
  const page = await openPage(browser);
  await page.goto(`${sidecar.url}#${ROUTE}`);
  await page.waitForSelector('#messages-table tbody tr[data-offset]');
  const t0 = await show(page, 'at', at);
  await page.waitForFunction(() => location.hash.includes('?at='), { timeout: 30_000 });
  console.log(`# page: from a time on screen ${ms(performance.now() - t0)} after the click`);
  const [first] = await rowOffsets(page);
  // The first message committed at or after the time: 300,000's or one
  // pushed with it, and the one before it committed earlier.
  assert.ok(first <= 300000, `first ${first}`);
  const firstMsg = await getJSON(`${API}/${first}`);
  assert.ok(Date.parse(firstMsg.committedAt) >= Date.parse(at), `${firstMsg.committedAt} before ${at}`);
  if (first > 0) {
    const before = await getJSON(`${API}/${first - 1}`);
    assert.ok(Date.parse(before.committedAt) < Date.parse(at), `${first - 1} committed at ${before.committedAt}, not before ${at}`);
  }
  console.log(`# API from a time: ${await timeApi(`${API}?at=${encodeURIComponent(at)}`)}`);
  await finish(page);
});

test('finds a transaction id, and says where it looked when it is not there', async () => {
  console.log(`# API transaction id search, found through the dedup index: ${await timeApi(`${API}?transactionId=${txid(123456)}`)}`);
  console.log(`# API transaction id search, not found (dedup probe, then the newest 100,000 read): ${await timeApi(`${API}?transactionId=no-such-id`)}`);
  const page = await openPage(browser);
  await page.goto(`${sidecar.url}#${ROUTE}`);
  await page.waitForSelector('#messages-table tbody tr[data-offset]');
  const t0 = await show(page, 'tx', txid(123456));
  await page.waitForSelector('#messages-table tr.match', { timeout: 30_000 });
  console.log(`# page: transaction id found and shown ${ms(performance.now() - t0)} after the click`);
  const offset = await page.$eval('#messages-table tr.match', (r) => Number(r.dataset.offset));
  assert.equal(await text(page, '#messages-table tr.match td:nth-of-type(1)'), txid(123456));
  assert.match(await text(page, '#browse-note'), new RegExp(`order-123456 is at offset ${offset.toLocaleString('en-US')} \\(found through the deduplication index\\)`));
  assert.equal((await getJSON(`${API}/${offset}`)).transactionId, txid(123456));
  await show(page, 'tx', 'no-such-id');
  await page.waitForFunction(() => /nor among the newest 100000 messages/.test(document.querySelector('#browse-note').textContent), { timeout: 30_000 });
  assert.deepEqual(await rowOffsets(page), []);
  await finish(page);
});

test('a group\'s cursor and leased offsets on the rows, a payload read whole, and nothing moved', async () => {
  // readers leases 0..99, acks 0..49 and 60: cursor 50, 60 acked under the lease.
  const popped = await client.pop(QUEUE, { group: 'readers', partition: PARTITION, batch: 100 });
  assert.equal(popped.messages.length, 100);
  await client.ack(popped.messages.filter((m) => m.offset < 50 || m.offset === 60).map(completed));
  const cursorsBefore = (await getJSON(`api/queues/${QUEUE}/partitions`)).partitions[0].groups;

  const page = await openPage(browser);
  await page.goto(`${sidecar.url}#${ROUTE}?from=44&limit=50&group=readers`);
  await page.waitForSelector('#messages-table tbody tr[data-state]');
  await waitValue(page, '#browse-group-state', '50', { attr: 'cursor' });
  await waitValue(page, '#browse-group-state', '50-99', { attr: 'leased' });
  assert.match(await text(page, '#browse-group-state'), /^Group readers: cursor at 50 \(offsets below it are consumed\); leased 50\.\.99 until \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC, of which acked: 60\.$/);
  const states = await page.$$eval('#messages-table tbody tr', (rows) => rows.map((r) => `${r.dataset.offset}:${r.dataset.state}`));
  const want = Array.from({ length: 50 }, (_, k) => {
    const o = 44 + k;
    return `${o}:${o < 50 ? 'consumed' : o === 60 ? 'acked' : 'leased'}`;
  });
  assert.deepEqual(states, want);
  assert.equal(await page.$eval('#browse-group', (s) => s.value), 'g:readers');

  // The whole payload, read when its row is opened.
  const row51 = '#messages-table tr[data-offset="51"]';
  const n = Number(/^order-(\d+)$/.exec(await text(page, `${row51} td:nth-of-type(2)`))[1]);
  await page.click(`${row51} .payload summary`);
  await page.waitForSelector(`${row51} pre[data-loaded="msgpack"]`);
  assert.deepEqual(JSON.parse(await text(page, `${row51} pre`)), { i: n, sku: `sku-${n % 97}` });

  await page.evaluate(() => window.scrollTo(0, 0));
  await finish(page, 'browse');

  // Browsing moved nothing: the same cursor and lease, and the lease still acks.
  const cursorsAfter = (await getJSON(`api/queues/${QUEUE}/partitions`)).partitions[0].groups;
  assert.deepEqual(cursorsAfter, cursorsBefore);
  const rest = await client.ack(popped.messages.filter((m) => m.offset >= 50 && m.offset !== 60).map(completed));
  assert.ok(rest.results.every((r) => r.success), JSON.stringify(rest.results.filter((r) => !r.success)));
});
