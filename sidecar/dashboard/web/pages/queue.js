// One queue: its groups with lag (charted live), its partitions a page at a
// time (keyset paging and a name prefix, so 10,000 partitions cost one page),
// pausing and resuming its consumption, and the seek form.
import { api, query, seg } from '../api.js';
import { h, num, rate, numCell, optionsText, stat, time, ago, groupName, writeError, pausedBadge } from '../dom.js';
import { confirmAction } from '../confirm.js';
import { LiveChart } from '../chart.js';
import { Rates } from './rates.js';
import { loadHistory, readings } from '../history.js';

const PAGE_SIZES = [50, 100, 250, 500];
const SEEK_SHOWN = 100;

export function create(ctx) {
  const name = ctx.param;
  const rates = new Rates();
  let groups = [];
  let chart = null;

  // ---- summary and groups
  const summary = h('div', { class: 'stats', id: 'queue-summary' });
  const options = h('p', { class: 'muted', id: 'queue-options' });
  const groupsBody = h('tbody');
  const groupsTable = h('table', { id: 'groups-table', class: 'data' },
    h('caption', { class: 'sr-only' }, 'Consumer groups'),
    h('thead', null, h('tr', null,
      h('th', { scope: 'col' }, 'Group'),
      h('th', { scope: 'col', class: 'num' }, 'Lag'),
      h('th', { scope: 'col', class: 'num' }, 'Consumed/s'),
      h('th', { scope: 'col', class: 'num' }, 'Consumed'),
      h('th', { scope: 'col', class: 'num' }, 'Leased partitions'),
      h('th', { scope: 'col' }, 'Oldest unconsumed'),
      h('th', { scope: 'col' }, 'Dead letters'))),
    groupsBody);
  const noGroups = h('p', { class: 'empty', hidden: true }, 'No consumer group has read this queue yet.');
  const chartBox = h('div', { class: 'chart', id: 'lag-chart' });

  // ---- partitions
  const page = { after: '', prefix: '', limit: 100, back: [], next: undefined, seq: 0 };
  const prefixInput = h('input', { id: 'partition-prefix', type: 'search', placeholder: 'name prefix', autocomplete: 'off', spellcheck: 'false' });
  const sizeSelect = h('select', { id: 'partition-limit' }, PAGE_SIZES.map((n) => h('option', { value: String(n), selected: n === page.limit }, String(n))));
  const firstBtn = h('button', { type: 'button', id: 'partitions-first' }, '« First');
  const prevBtn = h('button', { type: 'button', id: 'partitions-prev' }, '‹ Previous');
  const nextBtn = h('button', { type: 'button', id: 'partitions-next' }, 'Next ›');
  const pageInfo = h('span', { class: 'muted', id: 'partitions-page', 'aria-live': 'polite' });
  const partsBody = h('tbody');
  const partsTable = h('table', { id: 'partitions-table', class: 'data' },
    h('caption', { class: 'sr-only' }, 'Partitions'),
    h('thead', null, h('tr', null,
      h('th', { scope: 'col' }, 'Partition'),
      h('th', { scope: 'col', class: 'num' }, 'Head offset'),
      h('th', { scope: 'col', class: 'num' }, 'Messages'),
      h('th', { scope: 'col' }, 'Last commit'),
      h('th', { scope: 'col' }, 'Groups: cursor, lag, lease'))),
    partsBody);

  // ---- consumption: paused or running
  let paused = null; // unknown until the first summary
  // Bumped when a pause or resume starts and ends: a summary asked for
  // before then may carry the old state and must not show it.
  let pauseWrites = 0;
  const titleBadge = h('span', { id: 'queue-badges' });
  const pauseState = h('span', { id: 'pause-state' });
  const pauseBtn = h('button', { type: 'button', id: 'pause-toggle', disabled: true }, 'Pause consumption');
  const pauseStatus = h('div', { id: 'pause-status', class: 'form-status', role: 'status' });

  // ---- seek
  const seekGroup = h('select', { id: 'seek-group', name: 'group', required: true });
  const seekPartition = h('input', { id: 'seek-partition', name: 'partition', type: 'text', placeholder: 'every partition', autocomplete: 'off' });
  const seekTo = h('select', { id: 'seek-to', name: 'to' },
    h('option', { value: 'beginning' }, 'the beginning'),
    h('option', { value: 'end' }, 'the end'),
    h('option', { value: 'time' }, 'a time (RFC 3339)'));
  const seekTime = h('input', { id: 'seek-time', name: 'time', type: 'text', placeholder: '2026-11-30T07:59:00Z', disabled: true, autocomplete: 'off' });
  const seekStatus = h('div', { id: 'seek-status', class: 'form-status', role: 'status' });
  const seekForm = h('form', { id: 'seek-form', class: 'inline-form' },
    h('div', { class: 'field' }, h('label', { for: 'seek-group' }, 'Group'), seekGroup),
    h('div', { class: 'field' }, h('label', { for: 'seek-partition' }, 'Partition'), seekPartition),
    h('div', { class: 'field' }, h('label', { for: 'seek-to' }, 'Move to'), seekTo),
    h('div', { class: 'field' }, h('label', { for: 'seek-time' }, 'Time'), seekTime),
    h('div', { class: 'field' }, h('span', { class: 'label-spacer', 'aria-hidden': 'true' }, ' '), h('button', { type: 'submit', class: 'primary' }, 'Seek')));

  const title = h('h1', { id: 'page-title', tabindex: '-1' }, h('span', { class: 'muted' }, 'Queue '), name, titleBadge);
  const el = h('section', { 'aria-labelledby': 'page-title', dataset: { queue: name } },
    h('p', { class: 'crumbs' }, h('a', { href: '#/queues' }, 'Queues'), ' / ', name),
    title,
    summary,
    options,
    h('section', { class: 'card', id: 'pause-card', 'aria-labelledby': 'pause-title' },
      h('h2', { id: 'pause-title' }, 'Consumption'),
      h('div', { class: 'toolbar' }, pauseState, pauseBtn,
        h('span', { class: 'muted small' }, 'Pausing stops every group\'s pops from delivering this queue (they answer "paused") until it is resumed; pushes and acks keep working. Every sidecar applies it within 2 s. Needs the admin token.')),
      pauseStatus),
    h('section', { class: 'card', 'aria-labelledby': 'groups-title' },
      h('h2', { id: 'groups-title' }, 'Consumer groups'),
      h('div', { class: 'table-wrap' }, groupsTable),
      noGroups),
    h('section', { class: 'card', 'aria-labelledby': 'lag-title' },
      h('h2', { id: 'lag-title' }, 'Lag by group'),
      chartBox),
    h('section', { class: 'card', 'aria-labelledby': 'partitions-title' },
      h('h2', { id: 'partitions-title' }, 'Partitions'),
      h('div', { class: 'toolbar' },
        h('label', { for: 'partition-prefix' }, 'Filter'), prefixInput,
        h('label', { for: 'partition-limit' }, 'Per page'), sizeSelect,
        h('span', { class: 'spacer' }),
        pageInfo, firstBtn, prevBtn, nextBtn),
      h('div', { class: 'table-wrap' }, partsTable)),
    h('section', { class: 'card', 'aria-labelledby': 'seek-title' },
      h('h2', { id: 'seek-title' }, 'Seek a group'),
      h('p', { class: 'muted' }, 'Moves the group\'s cursors in one partition or all of them; its leases there are released. Needs the admin token.'),
      seekForm,
      seekStatus));

  function renderSummary(q, pr, cr) {
    summary.replaceChildren(
      stat('Partitions', num(q.partitions), { dataset: { stat: 'partitions' } }),
      stat('Messages', num(q.messages), { dataset: { stat: 'messages' } }),
      stat('Pushed', num(q.pushed), { dataset: { stat: 'pushed' } }),
      stat('Pushed/s', rate(pr), { dataset: { stat: 'pushedRate' } }),
      stat('Consumed/s', rate(cr), { dataset: { stat: 'consumedRate' } }),
      stat('Groups', num((q.groups || []).length), { dataset: { stat: 'groups' } }),
    );
    options.textContent = `Options: ${optionsText(q.options)}`;
  }

  function renderPaused(p) {
    paused = p;
    el.dataset.paused = String(p);
    titleBadge.replaceChildren(p ? pausedBadge() : '');
    pauseState.replaceChildren('Consumption: ', p ? h('span', { class: 'bad' }, 'paused') : h('span', { class: 'ok' }, 'running'));
    pauseBtn.textContent = p ? 'Resume consumption' : 'Pause consumption';
    pauseBtn.className = p ? 'primary' : '';
    pauseBtn.disabled = false;
  }

  function renderGroups(q) {
    const now = Date.now();
    groupsBody.replaceChildren(...groups.map((g) => {
      const cr = rates.update(`g:${g.group}`, q.at, g.consumed);
      const dlqLink = `#/dlq${query({ queue: name, group: g.group })}`;
      return h('tr', { dataset: { group: g.group } },
        h('th', { scope: 'row', class: 'name' }, groupName(g.group)),
        numCell(g.lag, undefined, { dataset: { col: 'lag', value: g.lag } }),
        numCell(cr, rate(cr), { dataset: { col: 'consumedRate', value: cr ?? '' } }),
        numCell(g.consumed, undefined, { dataset: { col: 'consumed', value: g.consumed } }),
        numCell(g.leasedPartitions, undefined, { dataset: { col: 'leased', value: g.leasedPartitions } }),
        h('td', { dataset: { col: 'oldest' } }, g.oldestUnconsumedAt ? ago(g.oldestUnconsumedAt, now) : h('span', { class: 'muted' }, 'none')),
        h('td', null, h('a', { href: dlqLink }, 'view')));
    }));
    noGroups.hidden = groups.length > 0;
  }

  function renderSeekGroups() {
    const have = [...seekGroup.options].map((o) => o.value);
    const want = groups.map((g) => g.group);
    if (have.length === want.length && have.every((v, i) => v === want[i])) return;
    const selected = seekGroup.value;
    seekGroup.replaceChildren(...groups.map((g) => h('option', { value: g.group, selected: g.group === selected }, g.group === '' ? '(queue mode)' : g.group)));
  }

  async function refreshSummary() {
    const writes = pauseWrites;
    // the lag chart starts from the served history, read once with the first reading
    const [q, hist] = await Promise.all([api(`queues/${seg(name)}`), chart ? null : loadHistory(name)]);
    if (!ctx.live()) return;
    groups = q.groups || [];
    const pr = rates.update('pushed', q.at, q.pushed);
    const cr = rates.update('consumed', q.at, q.consumed);
    renderSummary(q, pr, cr);
    if (writes === pauseWrites && !pauseBtn.dataset.busy) renderPaused(Boolean(q.options && q.options.consumptionPaused));
    renderGroups(q);
    renderSeekGroups();
    const legend = (g) => (g === '' ? '(queue mode)' : g);
    if (!chart) {
      chart = new LiveChart(chartBox, { label: `Lag by group of queue ${name}` });
      // a queue the history does not keep (past its bound) starts live
      if (hist.queue) chart.addAll(readings(hist.t, hist.queue.groups.map((g) => [g.group, g.lag])), legend);
    }
    chart.add(Date.parse(q.at) / 1000, new Map(groups.map((g) => [g.group, g.lag])), legend);
  }

  function leaseText(g) {
    if (!g.leased) return null;
    return h('span', { class: 'badge lease' }, g.leaseExpiresAt ? ['leased until ', time(g.leaseExpiresAt)] : 'leased');
  }

  async function loadPartitions() {
    const seq = ++page.seq;
    const data = await api(`queues/${seg(name)}/partitions${query({ after: page.after, limit: page.limit, prefix: page.prefix })}`);
    if (!ctx.live() || seq !== page.seq) return;
    const parts = data.partitions || [];
    page.next = data.next;
    partsBody.replaceChildren(...parts.map((p) => h('tr', { dataset: { partition: p.partition } },
      h('th', { scope: 'row', class: 'name' }, h('a', { href: `#/queues/${seg(name)}/partitions/${seg(p.partition)}`, title: 'Browse its messages' }, p.partition)),
      numCell(p.headOffset, undefined, { dataset: { col: 'head', value: p.headOffset } }),
      numCell(p.messages, undefined, { dataset: { col: 'messages', value: p.messages } }),
      h('td', null, p.lastCommittedAt ? time(p.lastCommittedAt) : h('span', { class: 'muted' }, '–')),
      h('td', { class: 'cursors' }, (p.groups || []).length
        ? h('ul', { class: 'cursor-list' }, p.groups.map((g) => h('li', { dataset: { group: g.group } },
          h('span', { class: 'group' }, groupName(g.group)),
          ` cursor ${num(g.cursor)} · lag ${num(g.lag)} `,
          leaseText(g))))
        : h('span', { class: 'muted' }, 'no group yet')))));
    if (!parts.length) {
      partsBody.replaceChildren(h('tr', null, h('td', { colspan: '5', class: 'empty' }, page.prefix ? `No partition starts with "${page.prefix}".` : 'No partitions.')));
    }
    const n = page.back.length + 1;
    pageInfo.textContent = parts.length
      ? `Page ${n}: ${parts[0].partition} … ${parts[parts.length - 1].partition} (${parts.length})`
      : `Page ${n}`;
    nextBtn.disabled = !page.next;
    prevBtn.disabled = page.back.length === 0;
    firstBtn.disabled = page.back.length === 0;
    partsTable.dataset.after = page.after;
  }

  async function go(fn) {
    fn();
    try {
      await loadPartitions();
    } catch (err) {
      if (!ctx.live()) return;
      pageInfo.textContent = `Could not load the partitions: ${err.message}`;
    }
  }

  nextBtn.addEventListener('click', () => go(() => {
    if (!page.next) return;
    page.back.push(page.after);
    page.after = page.next;
  }));
  prevBtn.addEventListener('click', () => go(() => {
    page.after = page.back.pop() ?? '';
  }));
  firstBtn.addEventListener('click', () => go(() => {
    page.after = '';
    page.back = [];
  }));
  sizeSelect.addEventListener('change', () => go(() => {
    page.limit = Number(sizeSelect.value);
  }));
  let prefixTimer = 0;
  prefixInput.addEventListener('input', () => {
    clearTimeout(prefixTimer);
    prefixTimer = setTimeout(() => go(() => {
      page.prefix = prefixInput.value;
      page.after = '';
      page.back = [];
    }), 250);
  });

  pauseBtn.addEventListener('click', async () => {
    const want = !paused;
    if (want) {
      const ok = await confirmAction({
        title: `Pause consumption of queue ${name}?`,
        text: 'No consumer group\'s pop will deliver this queue\'s messages until it is resumed. Pushes are still stored and acks keep working; every sidecar applies it within 2 s.',
        confirm: 'Pause consumption',
      });
      if (!ok || !ctx.live()) return;
    }
    pauseWrites++;
    pauseBtn.disabled = true;
    pauseBtn.dataset.busy = 'true';
    pauseStatus.className = 'form-status';
    pauseStatus.textContent = want ? 'Pausing…' : 'Resuming…';
    try {
      const res = await api(`queues/${seg(name)}/pause`, { method: 'POST', body: { paused: want } });
      if (!ctx.live()) return;
      const now = Boolean(res.options && res.options.consumptionPaused);
      renderPaused(now);
      if (res.options) options.textContent = `Options: ${optionsText(res.options)}`;
      pauseStatus.className = 'form-status ok';
      pauseStatus.textContent = now
        ? 'Consumption paused: pops of this queue deliver nothing until it is resumed.'
        : 'Consumption resumed: pops deliver this queue again.';
    } catch (err) {
      if (!ctx.live()) return;
      pauseStatus.className = 'form-status error';
      pauseStatus.textContent = writeError(err);
    } finally {
      pauseWrites++;
      delete pauseBtn.dataset.busy;
      if (paused !== null) pauseBtn.disabled = false;
    }
  });

  seekTo.addEventListener('change', () => {
    seekTime.disabled = seekTo.value !== 'time';
    if (!seekTime.disabled && !seekTime.value) seekTime.value = new Date(Date.now() - 3600_000).toISOString().slice(0, 19) + 'Z';
  });
  seekForm.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    let to = seekTo.value;
    if (to === 'time') {
      const t = Date.parse(seekTime.value);
      if (Number.isNaN(t)) {
        seekStatus.className = 'form-status error';
        seekStatus.textContent = 'The time is not an RFC 3339 time (e.g. 2026-11-30T07:59:00Z).';
        return;
      }
      to = new Date(t).toISOString();
    }
    if (!seekGroup.options.length) {
      seekStatus.className = 'form-status error';
      seekStatus.textContent = 'This queue has no group to seek.';
      return;
    }
    const body = { group: seekGroup.value, to };
    if (seekPartition.value.trim()) body.partition = seekPartition.value.trim();
    seekStatus.className = 'form-status';
    seekStatus.textContent = 'Seeking…';
    try {
      const res = await api(`queues/${seg(name)}/seek`, { method: 'POST', body });
      if (!ctx.live()) return;
      const cursors = res.cursors || [];
      seekStatus.className = 'form-status ok';
      seekStatus.replaceChildren(
        h('p', null, `Moved ${num(cursors.length)} cursor${cursors.length === 1 ? '' : 's'} of ${body.group === '' ? 'the queue-mode group' : `group ${body.group}`} to ${to}.`),
        cursors.length ? h('table', { class: 'data compact' },
          h('thead', null, h('tr', null, h('th', { scope: 'col' }, 'Partition'), h('th', { scope: 'col', class: 'num' }, 'Cursor'))),
          h('tbody', null, cursors.slice(0, SEEK_SHOWN).map((c) => h('tr', null, h('td', null, c.partition), numCell(c.cursor))))) : null,
        cursors.length > SEEK_SHOWN ? h('p', { class: 'muted' }, `The first ${SEEK_SHOWN} shown.`) : null);
      await Promise.allSettled([refreshSummary(), loadPartitions()]);
    } catch (err) {
      if (!ctx.live()) return;
      seekStatus.className = 'form-status error';
      seekStatus.textContent = writeError(err);
    }
  });

  return {
    el,
    title: `Queue ${name}`,
    async refresh() {
      await Promise.all([refreshSummary(), loadPartitions()]);
      el.dataset.ready = 'true';
    },
    destroy() {
      clearTimeout(prefixTimer);
      if (chart) chart.destroy();
    },
  };
}
