// Fills a queue with 10,000 partitions and 1,000,000 messages through the
// Node client (large batches, many in flight), then prints how long each
// dashboard page takes to show its data and how long its API calls take.
// Not part of `npm test`: `npm run big` (env BIG_PARTITIONS, BIG_MESSAGES).
import { performance } from 'node:perf_hooks';
import { connect, pushMany, startSidecar } from './harness.js';
import { launch, openPage } from './browser.js';

const PARTITIONS = Number(process.env.BIG_PARTITIONS || 10_000);
const MESSAGES = Number(process.env.BIG_MESSAGES || 1_000_000);
const BATCH = 1000; // items a push
const IN_FLIGHT = 16; // pushes at once, over CLIENTS connections
const CLIENTS = 4;
const QUEUE = 'big';

const partitionName = (i) => `part-${String(i).padStart(5, '0')}`;
const ms = (t) => `${t.toFixed(0)} ms`;

async function fill(sidecar) {
  let lastReport = performance.now();
  const started = performance.now();
  await pushMany(sidecar.socket, MESSAGES, (i) => ({ queue: QUEUE, partition: partitionName(i % PARTITIONS), payload: { i, at: 'big' } }), {
    batch: BATCH,
    inFlight: IN_FLIGHT,
    clients: CLIENTS,
    onProgress(done) {
      if (performance.now() - lastReport < 10_000) return;
      lastReport = performance.now();
      const s = (lastReport - started) / 1000;
      console.log(`  ${done.toLocaleString('en-US')} pushed in ${s.toFixed(0)} s (${Math.round(done / s).toLocaleString('en-US')}/s)`);
    },
  });
  const seconds = (performance.now() - started) / 1000;
  console.log(`filled: ${MESSAGES.toLocaleString('en-US')} messages in ${PARTITIONS.toLocaleString('en-US')} partitions in ${seconds.toFixed(1)} s (${Math.round(MESSAGES / seconds).toLocaleString('en-US')} messages/s)`);
  // two groups: one that read a little, one that read nothing yet
  const client = await connect({ socket: sidecar.socket });
  await client.pop(QUEUE, { group: 'readers', batch: 100, autoAck: true });
  await client.pop(QUEUE, { group: 'auditors', batch: 1, autoAck: true });
  await client.close();
}

async function timeApi(url, path, n = 5) {
  const times = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    const res = await fetch(url + path);
    await res.arrayBuffer();
    if (!res.ok) throw new Error(`${path}: HTTP ${res.status}`);
    times.push(performance.now() - t0);
  }
  times.sort((a, b) => a - b);
  return { median: times[Math.floor(n / 2)], max: times[n - 1] };
}

/** Navigates to route and waits until every selector is on screen. */
async function timePage(browser, url, route, selectors, then) {
  const page = await openPage(browser);
  const t0 = performance.now();
  await page.goto(`${url}#${route}`);
  for (const s of selectors) await page.waitForSelector(s, { timeout: 60_000 });
  const shown = performance.now() - t0;
  let extra;
  if (then) extra = await then(page);
  const api = await page.evaluate(() => performance.getEntriesByType('resource')
    .filter((e) => e.name.includes('/api/'))
    .map((e) => ({ path: new URL(e.name).pathname + new URL(e.name).search, ms: e.duration })));
  const problems = [...page.problems];
  await page.close();
  return { shown, extra, api, problems };
}

const sidecar = await startSidecar();
let browser;
try {
  console.log(`filling queue "${QUEUE}": ${MESSAGES.toLocaleString('en-US')} messages over ${PARTITIONS.toLocaleString('en-US')} partitions, batches of ${BATCH}, ${IN_FLIGHT} in flight on ${CLIENTS} connections`);
  await fill(sidecar);

  console.log('\nAPI calls (median / max of 5, from Node):');
  for (const path of ['api/queues', `api/queues/${QUEUE}`, `api/queues/${QUEUE}/partitions?limit=100`,
    `api/queues/${QUEUE}/partitions?limit=100&after=${partitionName(PARTITIONS / 2)}`, `api/queues/${QUEUE}/partitions?limit=500`,
    `api/queues/${QUEUE}/partitions?limit=100&prefix=${partitionName(PARTITIONS - 100).slice(0, -2)}`, 'api/dlq?limit=50', 'api/spool', 'api/cluster']) {
    const t = await timeApi(sidecar.url, path);
    console.log(`  ${path.padEnd(60)} ${ms(t.median).padStart(8)} / ${ms(t.max)}`);
  }

  browser = await launch();
  console.log('\nPages (navigation to data on screen, headless Chromium 1280x800):');
  const pages = [
    ['queues', '/queues', [`#queues-table tr[data-queue="${QUEUE}"]`]],
    ['queue', `/queues/${QUEUE}`, ['#groups-table tr[data-group="readers"]', '#partitions-table tbody tr[data-partition]'], async (page) => {
      const t0 = performance.now();
      await page.click('#partitions-next');
      await page.waitForFunction((p) => document.querySelector('#partitions-table tbody tr')?.dataset.partition === p, { timeout: 60_000 }, partitionName(100));
      const nextPage = performance.now() - t0;
      const t1 = performance.now();
      const last = partitionName(PARTITIONS - 10);
      await page.type('#partition-prefix', last.slice(0, -1));
      await page.waitForFunction((p) => document.querySelector('#partitions-table tbody tr')?.dataset.partition === p, { timeout: 60_000 }, last);
      const filtered = performance.now() - t1 - 250; // less the filter's typing pause
      return `next page ${ms(nextPage)}, prefix filter ${ms(filtered)} (after the 250 ms typing pause)`;
    }],
    ['dead letters', '/dlq', ['#dlq-table tbody tr']],
    ['spool', '/spool', ['[data-stat=records]']],
    ['cluster', '/cluster', ['#sidecars-table tr.self']],
  ];
  for (const [name, route, selectors, then] of pages) {
    const r = await timePage(browser, sidecar.url, route, selectors, then);
    const calls = r.api.map((a) => `${a.path} ${ms(a.ms)}`).join(', ');
    console.log(`  ${name.padEnd(13)} ${ms(r.shown).padStart(8)}  ${r.extra ? `${r.extra}; ` : ''}API in the page: ${calls}`);
    if (r.problems.length) console.log(`    problems: ${r.problems.join('; ')}`);
  }

  console.log('\nThe same pages reached from within the dashboard (a hash change in a loaded page, no page load):');
  const page = await openPage(browser);
  await page.goto(`${sidecar.url}#/spool`);
  await page.waitForSelector('[data-stat=records]');
  for (const [name, route, selectors] of pages) {
    const t0 = performance.now();
    await page.evaluate((r) => {
      location.hash = r;
    }, route);
    for (const s of selectors) await page.waitForSelector(s, { timeout: 60_000 });
    console.log(`  ${name.padEnd(13)} ${ms(performance.now() - t0).padStart(8)}`);
  }
  if (page.problems.length) console.log(`    problems: ${page.problems.join('; ')}`);
  await page.close();
} finally {
  if (browser) await browser.close();
  await sidecar.stop();
}
