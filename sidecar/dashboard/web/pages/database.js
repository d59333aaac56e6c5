// The database's health from the queues' point of view (api/database):
// the problems in sentences first, then what they come from: the oldest
// open transaction, prepared transactions and replication slots that hold
// back vacuum, the tables' sizes and dead tuples, connections, and
// replication.
import { api } from '../api.js';
import { h, num, bytes, duration, time, ago, numCell, stat } from '../dom.js';

export function create(ctx) {
  const problems = h('div', { id: 'database-problems' });
  const notes = h('div', { id: 'database-notes' });
  const cards = h('div', { class: 'stats', id: 'database-stats' });
  const oldest = h('div', { id: 'database-oldest' });
  const holders = h('div', { id: 'database-holders' });
  const tables = h('div', { class: 'table-wrap', id: 'database-tables' });
  const indexes = h('div', { class: 'table-wrap', id: 'database-indexes' });
  const byState = h('div', { class: 'table-wrap', id: 'database-states' });
  const byApp = h('div', { class: 'table-wrap', id: 'database-applications' });
  const replication = h('div', { id: 'database-replication' });
  const card = (id, title, ...body) => h('section', { class: 'card', 'aria-labelledby': id }, h('h2', { id }, title), ...body);
  const el = h('section', { 'aria-labelledby': 'page-title' },
    h('h1', { id: 'page-title', tabindex: '-1' }, 'Database'),
    h('p', { class: 'muted' }, 'What decides whether the queues stay fast, from PostgreSQL\'s statistics views: what holds back vacuum, the tables\' sizes and dead tuples, connections and replication.'),
    card('problems-title', 'Problems', problems, notes),
    cards,
    h('div', { class: 'columns' },
      card('oldest-title', 'Oldest open transaction', oldest),
      card('holders-title', 'Prepared transactions and replication slots', holders)),
    card('tables-title', 'Tables of the queenside schema', tables),
    h('div', { class: 'columns' },
      card('states-title', 'Connections by state (whole server)', byState),
      card('applications-title', 'Connections by application (this database)', byApp)),
    card('replication-title', 'Replication', replication),
    card('indexes-title', 'Indexes', indexes));

  async function refresh() {
    const d = await api('database');
    if (!ctx.live()) return;
    const now = Date.parse(d.at);
    renderProblems(d.problems || [], d.notes || []);
    const c = d.connections || {};
    const total = (d.tables || []).reduce((s, t) => s + t.totalBytes, 0);
    const dead = (d.tables || []).reduce((s, t) => s + t.deadTuples, 0);
    cards.replaceChildren(
      stat('Role', d.inRecovery ? 'standby' : 'primary', { dataset: { stat: 'role' } }),
      stat('Server', h('span', { title: d.serverVersion }, String(d.serverVersion).split(' ')[0]), { dataset: { stat: 'version' } }),
      stat('Queue tables', bytes(total), { dataset: { stat: 'size', value: total } }),
      stat('Dead tuples', num(dead), { dataset: { stat: 'dead', value: dead } }),
      stat('Oldest transaction', d.oldestTransaction ? duration(d.oldestTransaction.ageSeconds) : 'none', { dataset: { stat: 'oldest' } }),
      stat('Connections', `${num(c.total)} / ${num(c.max)}`, { dataset: { stat: 'connections', value: c.total } }),
    );
    renderOldest(d.oldestTransaction, now);
    renderHolders(d.preparedTransactions || [], d.replicationSlots || [], now);
    renderTables(d.tables || [], now);
    renderConnections(c);
    renderReplication(d);
    el.dataset.ready = 'true';
  }

  function renderProblems(list, noteList) {
    problems.replaceChildren(list.length
      ? h('ul', { class: 'problems' }, list.map((p) => h('li', { class: p.severity, dataset: { kind: p.kind, name: p.name ?? '', severity: p.severity } },
        h('span', { class: `badge ${p.severity}` }, p.severity), ' ', p.text)))
      : h('p', { class: 'ok', dataset: { problems: 'none' } }, 'No problem found.'));
    notes.replaceChildren(...noteList.map((n) => h('p', { class: 'muted small' }, n)));
  }

  function renderOldest(t, now) {
    if (!t) {
      oldest.replaceChildren(h('p', { class: 'muted' }, 'No other transaction is open in this database.'));
      return;
    }
    const field = (name, v) => h('dd', { dataset: { field: name } }, v);
    oldest.replaceChildren(h('dl', { class: 'kv' },
      h('dt', null, 'Open for'), field('age', duration(t.ageSeconds)),
      h('dt', null, 'Began'), field('xactStart', time(t.xactStart)),
      h('dt', null, 'Process'), field('pid', String(t.pid)),
      h('dt', null, 'Application'), field('application', t.application || h('span', { class: 'muted' }, '(none)')),
      h('dt', null, 'Role'), field('user', t.user || '–'),
      h('dt', null, 'State'), field('state', t.state || h('span', { class: 'muted' }, '(hidden)')),
      h('dt', null, 'Statement began'), field('queryStart', t.queryStart ? ago(t.queryStart, now) : '–'),
      h('dt', null, 'Holds back vacuum'), field('holdsHorizon', t.holdsHorizon
        ? h('span', { class: 'warn' }, `yes, by ${num(t.xidAge)} transactions`)
        : 'no (no transaction id, no snapshot)'),
      t.waitEvent ? [h('dt', null, 'Waiting on'), field('wait', t.waitEvent)] : null,
      h('dt', null, 'Statement'), field('query', t.query ? h('code', null, t.query)
        : t.queryHidden ? h('span', { class: 'muted' }, '(shown to admin tokens only)') : '–')));
  }

  function renderHolders(prepared, slots, now) {
    const parts = [];
    parts.push(prepared.length
      ? table('Prepared transactions', ['Prepared transaction', 'Prepared', 'Owner', n('Transactions held')], prepared.map((p) =>
        h('tr', { dataset: { prepared: p.gid } },
          h('th', { scope: 'row', class: 'name' }, p.gid),
          h('td', null, ago(p.prepared, now)),
          h('td', null, p.owner),
          numCell(p.xidAge))))
      : h('p', { class: 'muted' }, 'No prepared transaction in this database.'));
    parts.push(slots.length
      ? table('Replication slots', ['Slot', 'Type', 'In use', n('Transactions held'), n('WAL kept')], slots.map((s) =>
        h('tr', { dataset: { slot: s.slot } },
          h('th', { scope: 'row', class: 'name' }, s.slot),
          h('td', null, s.type, s.database ? ` (${s.database})` : ''),
          h('td', null, s.active ? 'yes' : h('span', { class: 'warn' }, 'no')),
          numCell(s.xidAge ?? s.catalogXidAge, s.xidAge != null ? num(s.xidAge) : s.catalogXidAge != null ? `${num(s.catalogXidAge)} (catalogs)` : '–'),
          numCell(s.retainedWalBytes, bytes(s.retainedWalBytes)))))
      : h('p', { class: 'muted' }, 'No replication slot.'));
    holders.replaceChildren(...parts);
  }

  function renderTables(list, now) {
    tables.replaceChildren(table('Tables', ['Table', n('Total'), n('Heap'), n('TOAST'), n('Indexes'), n('Live tuples'), n('Dead tuples'), n('Dead'), 'Last autovacuum', 'Last autoanalyze'],
      list.map((t) => h('tr', { dataset: { table: t.table } },
        h('th', { scope: 'row', class: 'name' }, t.table),
        numCell(t.totalBytes, bytes(t.totalBytes), { dataset: { col: 'total', value: t.totalBytes } }),
        numCell(t.heapBytes, bytes(t.heapBytes)),
        numCell(t.toastBytes, bytes(t.toastBytes)),
        numCell(t.indexBytes, bytes(t.indexBytes)),
        numCell(t.liveTuples, undefined, { dataset: { col: 'live', value: t.liveTuples } }),
        numCell(t.deadTuples, undefined, { dataset: { col: 'dead', value: t.deadTuples } }),
        numCell(t.deadPercent, `${t.deadPercent.toFixed(0)} %`),
        h('td', null, t.lastAutovacuum ? ago(t.lastAutovacuum, now) : h('span', { class: 'muted' }, 'never')),
        h('td', null, t.lastAutoanalyze ? ago(t.lastAutoanalyze, now) : h('span', { class: 'muted' }, 'never'))))));
    indexes.replaceChildren(table('Indexes', ['Index', 'Table', n('Size'), n('Scans')],
      list.flatMap((t) => t.indexes.map((i) => ({ ...i, table: t.table })))
        .sort((a, b) => b.bytes - a.bytes)
        .map((i) => h('tr', { dataset: { index: i.index } },
          h('th', { scope: 'row', class: 'name' }, i.index),
          h('td', null, i.table),
          numCell(i.bytes, bytes(i.bytes)),
          numCell(i.scans)))));
  }

  function renderConnections(c) {
    byState.replaceChildren(table('Connections by state', ['State', n('Sessions')],
      (c.byState || []).map((s) => h('tr', { dataset: { state: s.state } },
        h('th', { scope: 'row' }, s.state),
        numCell(s.count, undefined, { dataset: { col: 'count', value: s.count } })))),
    h('p', { class: 'muted small' }, `${num(c.total)} client sessions of the ${num(c.max)} the server allows (${num(c.reserved)} of them kept for superusers).`));
    byApp.replaceChildren(table('Connections by application', ['Application', n('Total'), n('Active'), n('Idle'), n('Idle in transaction'), n('Other')],
      (c.byApplication || []).map((a) => h('tr', { dataset: { application: a.application } },
        h('th', { scope: 'row', class: 'name' }, a.application || h('span', { class: 'muted' }, '(none)'), a.queenside ? h('span', { class: 'badge' }, 'sidecar') : null),
        numCell(a.total, undefined, { dataset: { col: 'total', value: a.total } }),
        numCell(a.active),
        numCell(a.idle),
        numCell(a.idleInTransaction, undefined, { dataset: { col: 'idleInTransaction', value: a.idleInTransaction } }),
        numCell(a.other)))));
  }

  function renderReplication(d) {
    const parts = [];
    const lag = (s) => (s == null ? '–' : duration(s));
    parts.push((d.standbys || []).length
      ? table('Standbys', ['Standby', 'Address', 'State', 'Sync', n('Write lag'), n('Flush lag'), n('Replay lag'), n('Replay behind')], d.standbys.map((s) =>
        h('tr', { dataset: { standby: s.application } },
          h('th', { scope: 'row', class: 'name' }, s.application || '(none)'),
          h('td', null, s.clientAddr), h('td', null, s.state), h('td', null, s.syncState),
          numCell(s.writeLagSeconds, lag(s.writeLagSeconds)),
          numCell(s.flushLagSeconds, lag(s.flushLagSeconds)),
          numCell(s.replayLagSeconds, lag(s.replayLagSeconds)),
          numCell(s.replayLagBytes, bytes(s.replayLagBytes)))))
      : h('p', { class: 'muted' }, 'No standby streams from this server.'));
    if (d.replay) {
      const r = d.replay;
      parts.push(h('dl', { class: 'kv', id: 'database-replay' },
        h('dt', null, 'This server'), h('dd', null, 'a standby, ', r.caughtUp ? h('span', { class: 'ok' }, 'caught up') : h('span', { class: 'warn' }, 'replaying')),
        h('dt', null, 'Last replayed commit'), h('dd', null, r.lastReplayAt ? [time(r.lastReplayAt), ' (', duration(r.secondsSince), ' ago)'] : '–'),
        h('dt', null, 'Received, not replayed'), h('dd', null, bytes(r.bytesBehind))));
    }
    replication.replaceChildren(...parts);
  }

  return { el, title: 'Database', refresh };
}

/** A right-aligned column's heading, for table(). */
const n = (text) => ({ text, num: true });

/** A data table with a hidden caption and a header row; heads are strings or n(...). */
function table(caption, heads, rows) {
  return h('table', { class: 'data' },
    h('caption', { class: 'sr-only' }, caption),
    h('thead', null, h('tr', null, heads.map((x) => h('th', { scope: 'col', class: x.num ? 'num' : null }, x.text ?? x)))),
    h('tbody', null, rows.length ? rows : h('tr', null, h('td', { colspan: String(heads.length), class: 'empty' }, 'None.'))));
}
