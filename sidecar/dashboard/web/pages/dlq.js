// Dead letters: counted by error, filtered by queue, group, partition,
// error text and time of death, a page at a time (afterId), each payload
// readable in full; replay of those selected, and the bulk actions of
// dlq_bulk.js.
import { api, query } from '../api.js';
import { h, num, bytes, time, groupName, writeError } from '../dom.js';
import { errorSummary } from './dlq_errors.js';
import { bulkActions } from './dlq_bulk.js';

const PREVIEW_CHARS = 80;

export function create(ctx) {
  const q = ctx.query;
  const filter = { queue: q.get('queue') || '', group: q.get('group') || '', partition: q.get('partition') || '', error: q.get('error') || '', from: q.get('from') || '', to: q.get('to') || '', limit: [25, 50, 100, 250].includes(Number(q.get('limit'))) ? Number(q.get('limit')) : 50 };
  const page = { afterId: '', back: [], next: undefined, entries: [], seq: 0, count: 0, replayedCount: 0 };
  const selected = new Set();

  const queueSelect = h('select', { id: 'dlq-queue', name: 'queue' }, h('option', { value: '' }, 'every queue'));
  if (filter.queue) queueSelect.append(h('option', { value: filter.queue, selected: true }, filter.queue));
  const groupInput = h('input', { id: 'dlq-group', name: 'group', type: 'text', value: filter.group, placeholder: 'any group', autocomplete: 'off' });
  const partitionInput = h('input', { id: 'dlq-partition', name: 'partition', type: 'text', value: filter.partition, placeholder: 'any partition', autocomplete: 'off' });
  const errorInput = h('input', { id: 'dlq-error', name: 'error', type: 'text', value: filter.error, placeholder: 'any error', autocomplete: 'off' });
  const fromInput = h('input', { id: 'dlq-from', name: 'from', type: 'datetime-local', value: filter.from });
  const toInput = h('input', { id: 'dlq-to', name: 'to', type: 'datetime-local', value: filter.to });
  const limitSelect = h('select', { id: 'dlq-limit', name: 'limit' }, [25, 50, 100, 250].map((n) => h('option', { value: String(n), selected: n === filter.limit }, String(n))));
  const form = h('form', { id: 'dlq-filter', class: 'inline-form', role: 'search' },
    h('div', { class: 'field' }, h('label', { for: 'dlq-queue' }, 'Queue'), queueSelect),
    h('div', { class: 'field' }, h('label', { for: 'dlq-group' }, 'Group'), groupInput),
    h('div', { class: 'field' }, h('label', { for: 'dlq-partition' }, 'Partition'), partitionInput),
    h('div', { class: 'field' }, h('label', { for: 'dlq-error' }, 'Error contains'), errorInput),
    h('div', { class: 'field' }, h('label', { for: 'dlq-from' }, 'Dead from'), fromInput),
    h('div', { class: 'field' }, h('label', { for: 'dlq-to' }, 'Dead before'), toInput),
    h('div', { class: 'field' }, h('label', { for: 'dlq-limit' }, 'Per page'), limitSelect),
    h('div', { class: 'field' }, h('span', { class: 'label-spacer', 'aria-hidden': 'true' }, ' '), h('button', { type: 'submit' }, 'Show')));

  const allBox = h('input', { type: 'checkbox', id: 'dlq-select-all', 'aria-label': 'Select every entry of this page' });
  const tbody = h('tbody');
  const table = h('table', { id: 'dlq-table', class: 'data' },
    h('caption', { class: 'sr-only' }, 'Dead letters'),
    h('thead', null, h('tr', null,
      h('th', { scope: 'col', class: 'check' }, allBox),
      h('th', { scope: 'col', class: 'num' }, 'ID'),
      h('th', { scope: 'col' }, 'Queue / partition'),
      h('th', { scope: 'col' }, 'Group'),
      h('th', { scope: 'col', class: 'num' }, 'Offset'),
      h('th', { scope: 'col', class: 'num' }, 'Failures'),
      h('th', { scope: 'col' }, 'Error'),
      h('th', { scope: 'col' }, 'Dead at'),
      h('th', { scope: 'col' }, 'Replayed'),
      h('th', { scope: 'col' }, 'Payload'))),
    tbody);
  const replayBtn = h('button', { type: 'button', id: 'dlq-replay', class: 'primary', disabled: true }, 'Replay selected');
  const refreshBtn = h('button', { type: 'button', id: 'dlq-refresh' }, 'Refresh');
  const firstBtn = h('button', { type: 'button', id: 'dlq-first' }, '« First');
  const prevBtn = h('button', { type: 'button', id: 'dlq-prev' }, '‹ Previous');
  const nextBtn = h('button', { type: 'button', id: 'dlq-next' }, 'Next ›');
  const pageInfo = h('span', { class: 'muted', id: 'dlq-page', 'aria-live': 'polite' });
  const status = h('div', { id: 'dlq-status', class: 'form-status', role: 'status' });
  const countLine = h('p', { id: 'dlq-count', class: 'muted', 'aria-live': 'polite' });

  // The op's filter of what the page shows (a datetime-local is local time).
  const iso = (local) => (local ? new Date(local).toISOString() : '');
  const opFilter = () => {
    const f = { queue: filter.queue, group: filter.group, partition: filter.partition, errorContains: filter.error, deadFrom: iso(filter.from), deadTo: iso(filter.to) };
    return Object.fromEntries(Object.entries(f).filter(([, v]) => v !== ''));
  };
  const summary = errorSummary(ctx, (queue, group, error) => ctx.navigate(`#/dlq${query({ queue, group, error })}`));
  const bulk = bulkActions(ctx, () => ({
    filter: filter.queue ? opFilter() : null,
    count: page.count,
    replayedCount: page.replayedCount,
    selected: [...selected].sort((a, b) => a - b),
  }), async () => {
    selected.clear();
    await Promise.all([load(), summary.load(filter.queue)]);
  });

  const el = h('section', { 'aria-labelledby': 'page-title' },
    h('h1', { id: 'page-title', tabindex: '-1' }, 'Dead letters'),
    h('p', { class: 'muted' }, 'Messages failed past their queue\'s retry budget. Replaying pushes a copy of the payload into its partition as a new message, delivered to every group; it needs the admin token.'),
    summary.el,
    form,
    countLine,
    bulk.el,
    h('div', { class: 'toolbar' }, replayBtn, refreshBtn, h('span', { class: 'spacer' }), pageInfo, firstBtn, prevBtn, nextBtn),
    status,
    h('div', { class: 'table-wrap' }, table));

  function updateReplayButton() {
    replayBtn.disabled = selected.size === 0;
    replayBtn.textContent = selected.size ? `Replay selected (${selected.size})` : 'Replay selected';
    const ids = page.entries.map((e) => e.id);
    const n = ids.filter((id) => selected.has(id)).length;
    allBox.checked = ids.length > 0 && n === ids.length;
    allBox.indeterminate = n > 0 && n < ids.length;
    bulk.update();
  }

  function payloadCell(e) {
    let full;
    try {
      full = JSON.stringify(e.payload, null, 2);
    } catch {
      full = String(e.payload);
    }
    if (full === undefined) full = 'null';
    const flat = full.replace(/\s*\n\s*/g, ' ');
    const preview = flat.length > PREVIEW_CHARS ? `${flat.slice(0, PREVIEW_CHARS)}…` : flat;
    return h('td', { class: 'payload' },
      h('details', null,
        h('summary', null, h('code', null, preview), h('span', { class: 'muted' }, ` ${bytes(e.payloadBytes)}`)),
        h('pre', { class: 'payload-full', tabindex: '0' }, full),
        h('p', { class: 'muted small' }, `message ${e.messageId} · transaction ${e.transactionId}`,
          e.producer ? ` · pushed by ${e.producer}` : '', ' · committed ', time(e.committedAt))));
  }

  function row(e) {
    const box = h('input', { type: 'checkbox', checked: selected.has(e.id), 'aria-label': `Select dead letter ${e.id}` });
    box.addEventListener('change', () => {
      if (box.checked) selected.add(e.id);
      else selected.delete(e.id);
      updateReplayButton();
    });
    return h('tr', { dataset: { id: e.id } },
      h('td', { class: 'check' }, box),
      h('td', { class: 'num' }, String(e.id)),
      h('td', null, h('span', { class: 'name' }, e.queue), h('span', { class: 'muted' }, ' / '), e.partition),
      h('td', null, groupName(e.group)),
      h('td', { class: 'num' }, num(e.offset)),
      h('td', { class: 'num' }, num(e.failures)),
      h('td', { class: 'error-text' }, e.error || h('span', { class: 'muted' }, '–')),
      h('td', null, time(e.deadAt)),
      h('td', { dataset: { col: 'replayed', value: e.replayedAt || '' } }, e.replayedAt
        ? [time(e.replayedAt), h('div', { class: 'muted small' }, `as offset ${num(e.replayedOffset)}`)]
        : h('span', { class: 'muted' }, 'no')),
      payloadCell(e));
  }

  async function load() {
    const seq = ++page.seq;
    const data = await api(`dlq${query({ ...opFilter(), afterId: page.afterId, limit: filter.limit, count: true })}`);
    if (!ctx.live() || seq !== page.seq) return;
    page.count = data.count || 0;
    page.replayedCount = data.replayedCount || 0;
    countLine.dataset.count = page.count;
    countLine.dataset.replayed = page.replayedCount;
    countLine.textContent = `${num(page.count)} dead letter${page.count === 1 ? '' : 's'} match${page.count === 1 ? 'es' : ''} this filter, ${num(page.replayedCount)} of them replayed already.`;
    page.entries = data.entries || [];
    page.next = data.nextAfterId;
    tbody.replaceChildren(...page.entries.map(row));
    if (!page.entries.length) {
      tbody.replaceChildren(h('tr', null, h('td', { colspan: '10', class: 'empty' }, page.back.length ? 'No more dead letters.' : 'No dead letters match.')));
    }
    const n = page.back.length + 1;
    pageInfo.textContent = page.entries.length
      ? `Page ${n}: ids ${page.entries[0].id} … ${page.entries[page.entries.length - 1].id}`
      : `Page ${n}`;
    nextBtn.disabled = page.next === undefined || page.next === null;
    prevBtn.disabled = firstBtn.disabled = page.back.length === 0;
    updateReplayButton();
    el.dataset.ready = 'true';
  }

  async function go(fn) {
    fn();
    try {
      await load();
    } catch (err) {
      if (ctx.live()) pageInfo.textContent = `Could not load the dead letters: ${err.message}`;
    }
  }

  async function loadQueues() {
    try {
      const data = await api('queues');
      if (!ctx.live()) return;
      const names = (data.queues || []).map((x) => x.queue);
      if (filter.queue && !names.includes(filter.queue)) names.push(filter.queue);
      queueSelect.replaceChildren(h('option', { value: '' }, 'every queue'),
        ...names.sort().map((n) => h('option', { value: n, selected: n === filter.queue }, n)));
    } catch {
      // the list stays as it is: the filter still works on what was asked
    }
  }

  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    filter.limit = Number(limitSelect.value);
    const params = {
      queue: queueSelect.value,
      group: groupInput.value.trim(),
      partition: partitionInput.value.trim(),
      error: errorInput.value,
      from: fromInput.value,
      to: toInput.value,
      limit: filter.limit === 50 ? '' : filter.limit,
    };
    const hash = `#/dlq${query(params)}`;
    if (location.hash === hash) go(() => {
      page.afterId = '';
      page.back = [];
    });
    else ctx.navigate(hash);
  });
  allBox.addEventListener('change', () => {
    for (const e of page.entries) {
      if (allBox.checked) selected.add(e.id);
      else selected.delete(e.id);
    }
    for (const box of tbody.querySelectorAll('input[type=checkbox]')) box.checked = allBox.checked;
    updateReplayButton();
  });
  nextBtn.addEventListener('click', () => go(() => {
    if (page.next === undefined || page.next === null) return;
    page.back.push(page.afterId);
    page.afterId = String(page.next);
  }));
  prevBtn.addEventListener('click', () => go(() => {
    page.afterId = page.back.pop() ?? '';
  }));
  firstBtn.addEventListener('click', () => go(() => {
    page.afterId = '';
    page.back = [];
  }));
  refreshBtn.addEventListener('click', () => go(() => {}));

  replayBtn.addEventListener('click', async () => {
    const ids = [...selected].sort((a, b) => a - b);
    if (!ids.length) return;
    replayBtn.disabled = true;
    status.className = 'form-status';
    status.textContent = `Replaying ${ids.length}…`;
    try {
      const res = await api('dlq/replay', { method: 'POST', body: { ids, includeReplayed: bulk.again() } });
      if (!ctx.live()) return;
      const results = res.results || [];
      const failed = results.filter((r) => r.error || !['queued', 'duplicate', 'buffered', 'skipped'].includes(r.status));
      status.className = failed.length ? 'form-status error' : 'form-status ok';
      status.replaceChildren(
        h('p', null, `Replayed ${results.length - failed.length} of ${results.length}.`),
        h('ul', { id: 'dlq-replay-results' }, results.map((r) => h('li', { dataset: { id: r.id, status: r.status } },
          `#${r.id}: ${r.status}`,
          r.offset !== undefined && r.offset !== null ? ` as offset ${num(r.offset)}` : '',
          r.error ? ` (${typeof r.error === 'object' ? r.error.message || r.error.code : r.error})` : ''))));
      selected.clear();
      await Promise.all([load(), summary.load(filter.queue)]);
    } catch (err) {
      if (!ctx.live()) return;
      status.className = 'form-status error';
      status.textContent = writeError(err);
      updateReplayButton();
    }
  });

  return {
    el,
    title: 'Dead letters',
    polled: false,
    async refresh() {
      loadQueues();
      summary.load(filter.queue).catch(() => {}); // the listing below says what is wrong
      await load();
    },
  };
}
