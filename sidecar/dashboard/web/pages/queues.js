// Every queue: partitions, messages, options, pushed/s and consumed/s, and a
// live chart of the totals.
import { api, seg } from '../api.js';
import { h, num, rate, numCell, optionsText, stat, pausedBadge } from '../dom.js';
import { LiveChart } from '../chart.js';
import { Rates, seriesRates } from './rates.js';
import { loadHistory, readings } from '../history.js';

export function create(ctx) {
  const rates = new Rates();
  const summary = h('div', { class: 'stats', id: 'queues-summary' });
  const chartBox = h('div', { class: 'chart', id: 'queues-chart' });
  const tbody = h('tbody');
  const table = h('table', { id: 'queues-table', class: 'data' },
    h('caption', { class: 'sr-only' }, 'Queues'),
    h('thead', null, h('tr', null,
      h('th', { scope: 'col' }, 'Queue'),
      h('th', { scope: 'col', class: 'num' }, 'Partitions'),
      h('th', { scope: 'col', class: 'num' }, 'Messages'),
      h('th', { scope: 'col', class: 'num' }, 'Groups'),
      h('th', { scope: 'col', class: 'num' }, 'Pushed/s'),
      h('th', { scope: 'col', class: 'num' }, 'Consumed/s'),
      h('th', { scope: 'col', class: 'num' }, 'Pushed'),
      h('th', { scope: 'col', class: 'num' }, 'Consumed'),
      h('th', { scope: 'col' }, 'Options'))),
    tbody);
  const empty = h('p', { class: 'empty', hidden: true }, 'No queues yet: a queue appears with its first push or configure.');
  const el = h('section', { 'aria-labelledby': 'page-title' },
    h('h1', { id: 'page-title', tabindex: '-1' }, 'Queues'),
    summary,
    h('section', { class: 'card', 'aria-labelledby': 'queues-chart-title' },
      h('h2', { id: 'queues-chart-title' }, 'Pushed and consumed per second, all queues'),
      chartBox),
    h('div', { class: 'table-wrap' }, table),
    empty);
  let chart = null;

  async function refresh() {
    // the chart starts from the served history, read once with the first reading
    const [data, hist] = await Promise.all([api('queues'), chart ? null : loadHistory()]);
    if (!ctx.live()) return;
    const list = data.queues || [];
    let pushedTotal = null;
    let consumedTotal = null;
    let messages = 0;
    const rows = list.map((q) => {
      const pr = rates.update(`p:${q.queue}`, data.at, q.pushed);
      const cr = rates.update(`c:${q.queue}`, data.at, q.consumed);
      if (pr !== null) pushedTotal = (pushedTotal ?? 0) + pr;
      if (cr !== null) consumedTotal = (consumedTotal ?? 0) + cr;
      messages += q.messages || 0;
      const paused = Boolean(q.options && q.options.consumptionPaused);
      return h('tr', { dataset: { queue: q.queue, paused: String(paused) } },
        h('th', { scope: 'row', class: 'name' }, h('a', { href: `#/queues/${seg(q.queue)}` }, q.queue), paused ? pausedBadge() : null),
        numCell(q.partitions, undefined, { dataset: { col: 'partitions', value: q.partitions } }),
        numCell(q.messages, undefined, { dataset: { col: 'messages', value: q.messages } }),
        numCell(q.groups, undefined, { dataset: { col: 'groups', value: q.groups } }),
        numCell(pr, rate(pr), { dataset: { col: 'pushedRate', value: pr ?? '' } }),
        numCell(cr, rate(cr), { dataset: { col: 'consumedRate', value: cr ?? '' } }),
        numCell(q.pushed, undefined, { dataset: { col: 'pushed', value: q.pushed } }),
        numCell(q.consumed, undefined, { dataset: { col: 'consumed', value: q.consumed } }),
        h('td', { class: 'options' }, optionsText(q.options)));
    });
    rates.prune(new Set(list.flatMap((q) => [`p:${q.queue}`, `c:${q.queue}`])));
    tbody.replaceChildren(...rows);
    empty.hidden = list.length > 0;
    summary.replaceChildren(
      stat('Queues', num(list.length)),
      stat('Messages', num(messages)),
      stat('Pushed/s', rate(pushedTotal)),
      stat('Consumed/s', rate(consumedTotal)),
    );
    if (!chart) {
      chart = new LiveChart(chartBox, { label: 'Pushed and consumed per second, all queues', unit: '/s' });
      chart.addAll(readings(hist.t, [['pushed/s', seriesRates(hist.at, hist.pushed)], ['consumed/s', seriesRates(hist.at, hist.consumed)]]));
    }
    chart.add(Date.parse(data.at) / 1000, new Map([['pushed/s', pushedTotal], ['consumed/s', consumedTotal]]));
    el.dataset.ready = 'true';
  }

  return {
    el,
    title: 'Queues',
    refresh,
    destroy: () => chart && chart.destroy(),
  };
}
