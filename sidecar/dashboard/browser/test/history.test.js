// The charts start from the sidecar's history: a page opened after traffic
// draws the minutes before it at once, then goes on live. The sidecar
// samples every 250 ms here (the hidden --history-interval) rather than
// every 5 s, so that the history fills in seconds.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { completed, uniqueQueue } from '../harness.js';
import { finishPage, openPage, text } from '../browser.js';
import { closeSuite, openSuite } from '../suite.js';

// What the history holds before a page is opened; more for `make screenshots`.
const SAMPLES = process.env.QUEENSIDE_SCREENSHOTS ? 120 : 12;

let sidecar;
let client;
let browser;
let shots;
let stopTraffic;
const queue = uniqueQueue('hist');

/** Pushes and acks every 200 ms, so that the rates and the lag move. */
function startTraffic() {
  const stop = new AbortController();
  let n = 0;
  const done = (async () => {
    while (!stop.signal.aborted) {
      try {
        await client.push(Array.from({ length: 6 }, () => ({ queue, partition: `p-${n++ % 3}`, payload: { n } })));
        const popped = await client.pop(queue, { group: 'billing', batch: 4, waitMs: 50 });
        if (popped.messages.length) await client.ack(popped.messages.map(completed));
      } catch {
        // stopping: the client may be closing
      }
      await new Promise((r) => setTimeout(r, 200));
    }
  })();
  return async () => {
    stop.abort();
    await done;
  };
}

const getJSON = async (path) => (await fetch(`${sidecar.url}api/${path}`)).json();

before(async () => {
  ({ sidecar, client, browser, shots } = await openSuite({ args: ['--history-interval', '250ms'] }));
  stopTraffic = startTraffic();
  // Wait until the history holds the traffic's group: its samples began
  // before any page was open.
  const deadline = Date.now() + 90_000;
  for (;;) {
    const h = await getJSON(`history?queue=${queue}`);
    if (h.at.length >= SAMPLES && h.queue && h.queue.groups.some((g) => g.group === 'billing' && g.lag.filter((v) => v !== null).length >= SAMPLES / 2)) break;
    if (Date.now() > deadline) throw new Error(`the history did not fill: ${JSON.stringify(h).slice(0, 500)}`);
    await new Promise((r) => setTimeout(r, 250));
  }
});

after(async () => {
  if (stopTraffic) await stopTraffic();
  await closeSuite({ sidecar, client, browser, shots });
});

const finish = (page, shot) => finishPage(page, shots, shot);

/**
 * Opens route and reads what its chart drew the first time it was drawn.
 * A live poll adds one reading every 2 s at most, and the first rate is
 * no reading at all: many readings, some older than the page, can only
 * be the history's.
 */
async function openChart(route, chart) {
  const history = await getJSON('history');
  const openedAt = Date.now() / 1000;
  const page = await openPage(browser);
  await page.goto(`${sidecar.url}#${route}`, { waitUntil: 'load' });
  const handle = await page.waitForFunction((sel) => {
    const el = document.querySelector(sel);
    return el && el.dataset.points ? { points: Number(el.dataset.points), since: Number(el.dataset.since) } : null;
  }, { polling: 'mutation', timeout: 15_000 }, chart);
  const first = await handle.jsonValue();
  assert.ok(first.points >= history.at.length - 1,
    `${chart} first drew ${first.points} points; the history had ${history.at.length} samples`);
  assert.ok(first.points >= SAMPLES - 1, `${chart} first drew only ${first.points} points`);
  assert.ok(first.since <= Date.parse(history.at[1]) / 1000 && first.since < openedAt - 2,
    `${chart} starts at ${first.since}, not at the history's start ${history.at[0]} (page opened at ${openedAt})`);
  await page.waitForSelector(`${chart} canvas`);
  return { page, first };
}

/** Waits until the chart has more points than it first drew: it goes on live. */
async function goesOnLive(page, chart, first) {
  await page.waitForFunction((sel, n, since) => {
    const el = document.querySelector(sel);
    return Number(el.dataset.points) > n || Number(el.dataset.since) > since;
  }, { timeout: 15_000 }, chart, first.points, first.since);
}

test('the queues page draws the pushed and consumed rates of the minutes before it opened, then live', async () => {
  const { page, first } = await openChart('/queues', '#queues-chart');
  assert.match(await text(page, '#queues-chart .u-legend'), /pushed\/s/);
  await goesOnLive(page, '#queues-chart', first);
  await finish(page, 'history');
});

test('the queue page draws its groups\' lag from the history, then live', async () => {
  const { page, first } = await openChart(`/queues/${encodeURIComponent(queue)}`, '#lag-chart');
  assert.match(await text(page, '#lag-chart .u-legend'), /billing/);
  await goesOnLive(page, '#lag-chart', first);
  await finish(page);
});

test('the cluster page draws the database round trip from the history, then live', async () => {
  const { page, first } = await openChart('/cluster', '#latency-chart');
  await goesOnLive(page, '#latency-chart', first);
  await finish(page);
});

test('the cluster page draws the messages this sidecar popped from the history, then live', async () => {
  const { page, first } = await openChart('/cluster', '#popped-chart');
  assert.match(await text(page, '#popped-chart .u-legend'), /popped\/s/);
  await goesOnLive(page, '#popped-chart', first);
  await finish(page);
});

test('the spool page draws the spooled records from the history, then live', async () => {
  const { page, first } = await openChart('/spool', '#spool-chart');
  await goesOnLive(page, '#spool-chart', first);
  await finish(page);
});
