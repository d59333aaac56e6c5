// The disk spool: what waits for PostgreSQL, the replay's progress,
// quarantined files and warnings.
import { api } from '../api.js';
import { h, num, bytes, ago, stat } from '../dom.js';
import { LiveChart } from '../chart.js';
import { loadHistory, readings } from '../history.js';

// Why pushes go to the spool now (the API's cause), and what each count of
// spooled items stands for.
const causes = {
  timeout: 'Pushes go to the spool: PostgreSQL did not answer within --database-timeout (a frozen host, or a network partition).',
  refused: 'Pushes go to the spool: PostgreSQL refused or reset the connection.',
  maintenance: 'Pushes go to the spool: push maintenance is on.',
};
const spooledAs = {
  timeout: 'because PostgreSQL did not answer in time',
  refused: 'because PostgreSQL refused the connection',
  maintenance: 'during push maintenance',
  behind: 'behind earlier items of their partition',
};

export function create(ctx) {
  const cards = h('div', { class: 'stats', id: 'spool-stats' });
  const progress = h('div', { id: 'spool-progress' });
  const chartBox = h('div', { class: 'chart', id: 'spool-chart' });
  const quarantined = h('div', { id: 'spool-quarantined' });
  const warnings = h('div', { id: 'spool-warnings' });
  const cause = h('div', { id: 'spool-cause' });
  const spooled = h('div', { id: 'spool-spooled' });
  const disabled = h('p', { class: 'empty', hidden: true, id: 'spool-disabled' }, 'This sidecar runs without a spool: a push fails while PostgreSQL is unreachable.');
  const el = h('section', { 'aria-labelledby': 'page-title' },
    h('h1', { id: 'page-title', tabindex: '-1' }, 'Spool'),
    h('p', { class: 'muted' }, 'Pushes this sidecar kept on disk while PostgreSQL was unreachable, replayed oldest first once it answers again.'),
    disabled,
    cause,
    cards,
    progress,
    h('section', { class: 'card', 'aria-labelledby': 'spool-chart-title' },
      h('h2', { id: 'spool-chart-title' }, 'Spooled records'),
      chartBox),
    h('div', { class: 'columns' },
      h('section', { class: 'card', 'aria-labelledby': 'spooled-title' }, h('h2', { id: 'spooled-title' }, 'Spooled, by cause'), spooled),
      h('section', { class: 'card', 'aria-labelledby': 'quarantine-title' }, h('h2', { id: 'quarantine-title' }, 'Quarantined files'), quarantined),
      h('section', { class: 'card', 'aria-labelledby': 'warnings-title' }, h('h2', { id: 'warnings-title' }, 'Warnings'), warnings)));
  let chart = null;
  let replayStart = null; // {replayed, records} when a replay was first seen

  async function refresh() {
    // the chart starts from the served history, read once with the first reading
    const [s, hist] = await Promise.all([api('spool'), chart ? null : loadHistory()]);
    if (!ctx.live()) return;
    disabled.hidden = s.enabled !== false;
    cards.replaceChildren(
      stat('Records', num(s.records), { dataset: { stat: 'records', value: s.records } }),
      stat('Bytes', bytes(s.bytes), { dataset: { stat: 'bytes', value: s.bytes } }),
      stat('Oldest', s.oldestAt ? ago(s.oldestAt) : 'none', { dataset: { stat: 'oldest' } }),
      stat('Database', s.databaseUp ? h('span', { class: 'ok' }, 'up') : h('span', { class: 'bad' }, 'down'), { dataset: { stat: 'database' } }),
      stat('Replaying', s.replaying ? h('span', { class: 'warn' }, 'yes') : 'no', { dataset: { stat: 'replaying' } }),
      stat('Replayed', num(s.replayed), { dataset: { stat: 'replayed', value: s.replayed } }),
      stat('Rejected', s.rejected ? h('span', { class: 'bad' }, num(s.rejected)) : '0', { dataset: { stat: 'rejected', value: s.rejected } }),
    );
    cause.replaceChildren(s.cause
      ? h('p', { class: 'card warn', dataset: { cause: s.cause } }, causes[s.cause] || `Pushes go to the spool: ${s.cause}.`)
      : []);
    const counted = Object.entries(s.spooled || {});
    spooled.replaceChildren(counted.length
      ? h('ul', { class: 'plain' }, counted.map(([c, n]) => h('li', { dataset: { spooled: c, value: n } }, `${num(n)} ${spooledAs[c] || c}`)))
      : h('p', { class: 'muted' }, 'None since this sidecar started.'));
    if (s.replaying) {
      if (!replayStart) replayStart = { replayed: s.replayed, records: s.records };
      const done = s.replayed - replayStart.replayed;
      const total = Math.max(done + s.records, 1);
      progress.replaceChildren(h('div', { class: 'card' },
        h('label', { for: 'spool-replay-bar' }, `Replay: ${num(done)} replayed since this page saw it start, ${num(s.records)} left`),
        h('progress', { id: 'spool-replay-bar', max: String(total), value: String(done) })));
    } else {
      replayStart = null;
      progress.replaceChildren();
    }
    const q = s.quarantined || [];
    quarantined.replaceChildren(q.length
      ? h('ul', { class: 'plain' }, q.map((f) => h('li', null, h('code', null, f))))
      : h('p', { class: 'muted' }, 'None.'));
    const w = s.warnings || [];
    warnings.replaceChildren(w.length
      ? h('ul', { class: 'plain warnings' }, w.map((x) => h('li', null, x)))
      : h('p', { class: 'muted' }, 'None.'));
    if (!chart) {
      chart = new LiveChart(chartBox, { label: 'Spooled records over time' });
      chart.addAll(readings(hist.t, [['records', hist.spoolRecords]]));
    }
    chart.add(Date.parse(s.at) / 1000, new Map([['records', s.records]]));
    el.dataset.ready = 'true';
  }

  return { el, title: 'Spool', refresh, destroy: () => chart && chart.destroy() };
}
