// The cluster: the sidecars connected to the database, the database's
// health and latency, this sidecar's health and pops, and maintenance when
// the sidecar reports it, with the controls to turn it on and off.
import { api } from '../api.js';
import { h, num, time, ago, bytes, duration, stat, writeError } from '../dom.js';
import { LiveChart } from '../chart.js';
import { confirmAction } from '../confirm.js';
import { loadHistory, readings } from '../history.js';
import { Rates, seriesRates } from './rates.js';

// What each kind of maintenance does, in the words the card and the
// confirmation use.
const MAINTENANCE = {
  push: {
    label: 'Push maintenance',
    does: 'Every sidecar spools pushes to its disk instead of storing them (a push answers "buffered"); the spools replay them when it is turned off.',
  },
  pop: {
    label: 'Pop maintenance',
    does: 'Pops deliver nothing on every sidecar (they answer "paused"); acks keep working.',
  },
};

export function create(ctx) {
  const cards = h('div', { class: 'stats', id: 'cluster-stats' });
  const maintenance = h('div', { id: 'cluster-maintenance' });
  const health = h('dl', { class: 'kv', id: 'cluster-health' });
  const database = h('dl', { class: 'kv', id: 'cluster-database' });
  const chartBox = h('div', { class: 'chart', id: 'latency-chart' });
  const poppedBox = h('div', { class: 'chart', id: 'popped-chart' });
  const poppedRate = new Rates();
  const tbody = h('tbody');
  const table = h('table', { id: 'sidecars-table', class: 'data' },
    h('caption', { class: 'sr-only' }, 'Sidecars connected to the database'),
    h('thead', null, h('tr', null,
      h('th', { scope: 'col' }, 'Sidecar'),
      h('th', { scope: 'col', class: 'num' }, 'Connections'),
      h('th', { scope: 'col' }, 'Connected since'),
      h('th', { scope: 'col' }, 'Client addresses'))),
    tbody);
  const el = h('section', { 'aria-labelledby': 'page-title' },
    h('h1', { id: 'page-title', tabindex: '-1' }, 'Cluster'),
    cards,
    maintenance,
    h('section', { class: 'card', 'aria-labelledby': 'sidecars-title' },
      h('h2', { id: 'sidecars-title' }, 'Sidecars connected to the database'),
      h('div', { class: 'table-wrap' }, table)),
    h('div', { class: 'columns' },
      h('section', { class: 'card', 'aria-labelledby': 'database-title' }, h('h2', { id: 'database-title' }, 'Database'), database),
      h('section', { class: 'card', 'aria-labelledby': 'health-title' }, h('h2', { id: 'health-title' }, 'This sidecar'), health)),
    h('section', { class: 'card', 'aria-labelledby': 'latency-title' },
      h('h2', { id: 'latency-title' }, 'Database round trip (ms)'),
      chartBox),
    h('section', { class: 'card', 'aria-labelledby': 'popped-title' },
      h('h2', { id: 'popped-title' }, 'Messages popped per second by this sidecar'),
      poppedBox));
  let chart = null;
  let poppedChart = null;

  function kv(pairs) {
    return pairs.filter(Boolean).flatMap(([k, v]) => [h('dt', null, k), h('dd', null, v)]);
  }

  // ---- maintenance: built once and updated in place, so that a refresh
  // keeps the focus on its buttons and the outcome of the last change.
  let maint = null; // the last state shown
  let maintWrites = 0; // bumped around a change: older reads must not show
  const maintStatus = h('div', { id: 'maintenance-status', class: 'form-status', role: 'status' });
  const maintRows = {};
  for (const kind of ['push', 'pop']) {
    const state = h('span', { class: 'maintenance-state', dataset: { maintenance: kind } });
    const button = h('button', { type: 'button', id: `maintenance-${kind}-toggle` });
    button.addEventListener('click', () => toggleMaintenance(kind));
    maintRows[kind] = { state, button };
  }
  const maintCard = h('section', { class: 'card maintenance', 'aria-labelledby': 'maintenance-title', id: 'maintenance-card' },
    h('h2', { id: 'maintenance-title' }, 'Maintenance'),
    h('p', { class: 'muted' }, 'Cluster-wide: every sidecar applies a change within 2 s. Changing it needs the admin token.'),
    h('dl', { class: 'kv maintenance-list' }, ['push', 'pop'].flatMap((kind) => [
      h('dt', null, MAINTENANCE[kind].label),
      h('dd', null,
        h('div', { class: 'toolbar' }, maintRows[kind].state, maintRows[kind].button),
        h('p', { class: 'muted small' }, MAINTENANCE[kind].does)),
    ])),
    maintStatus);

  function renderMaintenance(m) {
    maint = m;
    ctx.setMaintenance(m);
    if (!m || typeof m !== 'object') {
      maintenance.replaceChildren();
      return;
    }
    for (const kind of ['push', 'pop']) {
      const on = Boolean(m[kind]);
      const since = m[`${kind}Since`];
      const { state, button } = maintRows[kind];
      state.dataset.on = String(on);
      state.replaceChildren(on
        ? h('span', null, h('span', { class: 'bad' }, 'on'), since ? [' since ', time(since), ' (', ago(since), ')'] : null)
        : h('span', { class: 'ok' }, 'off'));
      button.textContent = `Turn ${kind} maintenance ${on ? 'off' : 'on'}`;
      if (!button.dataset.busy) button.disabled = false;
    }
    // attached only when it changes, so that a focused button keeps the focus
    if (!maintCard.isConnected) maintenance.replaceChildren(maintCard);
  }

  async function toggleMaintenance(kind) {
    const on = !(maint && maint[kind]);
    if (on) {
      const ok = await confirmAction({
        title: `Turn ${kind} maintenance on?`,
        text: `${MAINTENANCE[kind].does} It stays on until it is turned off here.`,
        confirm: `Turn ${kind} maintenance on`,
      });
      if (!ok || !ctx.live()) return;
    }
    const { button } = maintRows[kind];
    maintWrites++;
    button.disabled = true;
    button.dataset.busy = 'true';
    maintStatus.className = 'form-status';
    maintStatus.textContent = `Turning ${kind} maintenance ${on ? 'on' : 'off'}…`;
    try {
      const res = await api('maintenance', { method: 'POST', body: { [kind]: on } });
      if (!ctx.live()) return;
      delete button.dataset.busy;
      renderMaintenance(res);
      maintStatus.className = 'form-status ok';
      maintStatus.textContent = `${MAINTENANCE[kind].label} is ${res[kind] ? 'on' : 'off'}.`;
    } catch (err) {
      if (!ctx.live()) return;
      maintStatus.className = 'form-status error';
      maintStatus.textContent = writeError(err);
    } finally {
      maintWrites++;
      delete button.dataset.busy;
      button.disabled = false;
    }
  }

  function healthRows(x) {
    if (!x || typeof x !== 'object') return kv([['Status', String(x ?? '–')]]);
    const rows = [];
    const known = new Set(['status', 'database', 'spool', 'version', 'uptimeSeconds']);
    rows.push(['Status', statusText(x.status)]);
    if (x.database !== undefined) rows.push(['Database', describe(x.database)]);
    if (x.spool !== undefined) rows.push(['Spool', describe(x.spool)]);
    if (x.version !== undefined) rows.push(['Version', String(x.version)]);
    if (x.uptimeSeconds !== undefined) rows.push(['Uptime', duration(x.uptimeSeconds)]);
    for (const [k, v] of Object.entries(x)) if (!known.has(k)) rows.push([k, describe(v)]);
    return kv(rows);
  }

  async function refresh() {
    const writes = maintWrites;
    // the charts start from the served history, read once with the first reading
    const [c, hist] = await Promise.all([api('cluster'), chart ? null : loadHistory()]);
    if (!ctx.live()) return;
    const db = c.database || {};
    const sidecars = c.sidecars || [];
    const self = ctx.info.sidecarId;
    cards.replaceChildren(
      stat('Sidecars', num(sidecars.length), { dataset: { stat: 'sidecars', value: sidecars.length } }),
      stat('Database', db.ok ? h('span', { class: 'ok' }, 'ok') : h('span', { class: 'bad' }, 'down'), { dataset: { stat: 'database' } }),
      stat('Latency', db.latencyMs !== undefined && db.latencyMs !== null ? `${Number(db.latencyMs).toFixed(2)} ms` : '–', { dataset: { stat: 'latency' } }),
      stat('This sidecar', statusText(c.health && c.health.status), { dataset: { stat: 'health' } }),
    );
    if (writes === maintWrites) renderMaintenance(c.maintenance);
    tbody.replaceChildren(...sidecars.map((s) => {
      const mine = Boolean(self) && (s.sidecarId === self || s.name === self || s.name === `queenside/${self}`);
      return h('tr', { dataset: { sidecar: s.name }, class: mine ? 'self' : null },
        h('th', { scope: 'row', class: 'name' }, s.name, mine ? h('span', { class: 'badge' }, 'this sidecar') : null),
        h('td', { class: 'num' }, num(s.connections)),
        h('td', null, s.since ? [time(s.since), h('span', { class: 'muted' }, ' (', ago(s.since), ')')] : '–'),
        h('td', null, (s.clientAddrs || []).join(', ') || h('span', { class: 'muted' }, 'Unix socket')));
    }));
    if (!sidecars.length) tbody.replaceChildren(h('tr', null, h('td', { colspan: '4', class: 'empty' }, 'No sidecar session seen (the database may be unreachable).')));
    database.replaceChildren(...kv([
      ['Status', db.ok ? h('span', { class: 'ok' }, 'ok') : h('span', { class: 'bad' }, 'unreachable')],
      db.latencyMs !== undefined && db.latencyMs !== null && ['Round trip', `${Number(db.latencyMs).toFixed(2)} ms`],
      db.serverVersion && ['Server version', db.serverVersion],
      db.error && ['Error', h('span', { class: 'bad' }, typeof db.error === 'object' ? db.error.message || JSON.stringify(db.error) : String(db.error))],
      ['Checked', time(c.at)],
    ]));
    health.replaceChildren(...healthRows(c.health));
    if (!chart) {
      chart = new LiveChart(chartBox, { label: 'Database round trip in milliseconds', unit: ' ms' });
      chart.addAll(readings(hist.t, [['round trip', hist.databaseLatencyMs]]));
    }
    chart.add(Date.parse(c.at) / 1000, new Map([['round trip', db.latencyMs ?? null]]));
    if (!poppedChart) {
      poppedChart = new LiveChart(poppedBox, { label: 'Messages popped per second by this sidecar', unit: '/s' });
      poppedChart.addAll(readings(hist.t, [['popped/s', seriesRates(hist.at, hist.popped)]]));
    }
    poppedChart.add(Date.parse(c.at) / 1000, new Map([['popped/s', poppedRate.update('', c.at, c.popped)]]));
    el.dataset.ready = 'true';
  }

  // this page reads the maintenance state itself: the header need not
  const destroy = () => [chart, poppedChart].forEach((c) => c && c.destroy());
  return { el, title: 'Cluster', refresh, readsMaintenance: true, destroy };
}

function statusText(s) {
  if (s === undefined || s === null) return '–';
  const cls = s === 'ok' ? 'ok' : s === 'degraded' ? 'warn' : 'bad';
  return h('span', { class: cls }, String(s));
}

/** A health sub-object in words: known shapes first, else its fields. */
function describe(v) {
  if (v === null || v === undefined) return '–';
  if (typeof v !== 'object') return String(v);
  const parts = [];
  if ('status' in v) parts.push(String(v.status));
  if ('ok' in v) parts.push(v.ok ? 'ok' : 'down');
  if ('latencyMs' in v && v.latencyMs !== null) parts.push(`${Number(v.latencyMs).toFixed(2)} ms`);
  if ('records' in v) parts.push(`${num(v.records)} records`);
  if ('bytes' in v) parts.push(bytes(v.bytes));
  if ('replaying' in v) parts.push(v.replaying ? 'replaying' : 'not replaying');
  for (const [k, x] of Object.entries(v)) {
    if (['status', 'ok', 'latencyMs', 'records', 'bytes', 'replaying'].includes(k)) continue;
    if (x === null || x === undefined || (Array.isArray(x) && !x.length)) continue;
    parts.push(`${k} ${typeof x === 'object' ? JSON.stringify(x) : String(x)}`);
  }
  return parts.join(', ') || '–';
}
