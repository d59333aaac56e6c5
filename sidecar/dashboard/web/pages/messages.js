// A partition's messages, a page at a time: the newest, from an offset,
// from a time, or around a transaction id; each payload previewed and read
// whole when opened; with a group chosen, where its cursor and lease stand
// on every row. Read-only: browsing moves no cursor and no lease. The view
// is kept in the address (?from= / ?at= / ?tx=, &group=, &limit=) so that
// it can be shared; moving between pages does not reload the page.
import { api, query, seg } from '../api.js';
import { h, num, bytes, stat, time } from '../dom.js';

const PAGE_SIZES = [20, 50, 100, 200, 500];
const STATE_TEXT = {
  consumed: 'consumed',
  acked: 'acked, the cursor waits for an earlier one',
  leased: 'leased',
  pending: 'pending',
};

export function create(ctx) {
  const [queue, partition] = ctx.params;
  const base = `queues/${seg(queue)}/partitions/${seg(partition)}/messages`;
  const view = {
    mode: ctx.query.has('tx') ? 'tx' : ctx.query.has('at') ? 'at' : ctx.query.has('from') ? 'from' : 'newest',
    value: ctx.query.get('tx') ?? ctx.query.get('at') ?? ctx.query.get('from') ?? '',
    // a group "" (the queue-mode group) differs from none: groupChosen
    groupChosen: ctx.query.has('group'),
    group: ctx.query.get('group') ?? '',
    limit: PAGE_SIZES.includes(Number(ctx.query.get('limit'))) ? Number(ctx.query.get('limit')) : 50,
  };
  let seq = 0;
  let last = null; // the page shown

  const summary = h('div', { class: 'stats', id: 'browse-summary' });
  const modeSelect = h('select', { id: 'browse-mode' },
    h('option', { value: 'newest' }, 'the newest'),
    h('option', { value: 'from' }, 'from an offset'),
    h('option', { value: 'at' }, 'from a time (RFC 3339)'),
    h('option', { value: 'tx' }, 'by transaction id'));
  modeSelect.value = view.mode;
  const valueInput = h('input', { id: 'browse-value', type: 'text', autocomplete: 'off', spellcheck: 'false', value: view.value });
  const groupSelect = h('select', { id: 'browse-group' }, h('option', { value: '' }, '(none)'));
  const sizeSelect = h('select', { id: 'browse-limit' }, PAGE_SIZES.map((n) => h('option', { value: String(n), selected: n === view.limit }, String(n))));
  const form = h('form', { id: 'browse-form', class: 'inline-form' },
    h('div', { class: 'field' }, h('label', { for: 'browse-mode' }, 'Show'), modeSelect),
    h('div', { class: 'field' }, h('label', { for: 'browse-value' }, 'Offset, time or id'), valueInput),
    h('div', { class: 'field' }, h('label', { for: 'browse-group' }, 'Group'), groupSelect),
    h('div', { class: 'field' }, h('label', { for: 'browse-limit' }, 'Per page'), sizeSelect),
    h('div', { class: 'field' }, h('span', { class: 'label-spacer', 'aria-hidden': 'true' }, ' '), h('button', { type: 'submit', class: 'primary', id: 'browse-go' }, 'Show')));
  const groupLine = h('p', { id: 'browse-group-state', hidden: true });
  const note = h('p', { id: 'browse-note', class: 'form-status', role: 'status' });
  const olderBtn = h('button', { type: 'button', id: 'browse-older' }, '‹ Older');
  const newerBtn = h('button', { type: 'button', id: 'browse-newer' }, 'Newer ›');
  const newestBtn = h('button', { type: 'button', id: 'browse-newest' }, 'Newest »');
  const pageInfo = h('span', { class: 'muted', id: 'browse-page', 'aria-live': 'polite' });
  const stateHead = h('th', { scope: 'col', hidden: true }, 'State');
  const body = h('tbody');
  const table = h('table', { id: 'messages-table', class: 'data' },
    h('caption', { class: 'sr-only' }, `Messages of partition ${partition}`),
    h('thead', null, h('tr', null,
      h('th', { scope: 'col', class: 'num' }, 'Offset'),
      stateHead,
      h('th', { scope: 'col' }, 'Transaction id'),
      h('th', { scope: 'col' }, 'Committed'),
      h('th', { scope: 'col' }, 'Trace id'),
      h('th', { scope: 'col' }, 'Headers'),
      h('th', { scope: 'col' }, 'Payload'))),
    body);

  const queueHref = `#/queues/${seg(queue)}`;
  const el = h('section', { 'aria-labelledby': 'page-title', dataset: { queue, partition } },
    h('p', { class: 'crumbs' }, h('a', { href: '#/queues' }, 'Queues'), ' / ', h('a', { href: queueHref }, queue), ' / ', partition),
    h('h1', { id: 'page-title', tabindex: '-1' }, h('span', { class: 'muted' }, 'Partition '), partition),
    summary,
    h('section', { class: 'card', 'aria-labelledby': 'browse-title' },
      h('h2', { id: 'browse-title' }, 'Messages'),
      h('p', { class: 'muted small' }, 'Reading moves no cursor and no lease. With a group chosen, each message shows whether the group consumed it, holds it leased, or has it to come.'),
      form,
      groupLine,
      note,
      h('div', { class: 'toolbar' }, pageInfo, h('span', { class: 'spacer' }), olderBtn, newerBtn, newestBtn),
      h('div', { class: 'table-wrap' }, table)));

  function valueHint() {
    const hints = { newest: '', from: 'an offset, e.g. 0', at: '2026-11-30T07:59:00Z', tx: 'a transaction id' };
    valueInput.placeholder = hints[modeSelect.value];
    valueInput.disabled = modeSelect.value === 'newest';
  }
  valueHint();

  /** The API's query for the view. */
  function apiQuery() {
    const q = { limit: view.limit };
    if (view.mode === 'from') q.from = view.value;
    if (view.mode === 'at') q.at = view.value;
    if (view.mode === 'tx') q.transactionId = view.value;
    if (view.groupChosen) q.group = view.group;
    return q;
  }

  /** Keeps the view in the address without a reload (no hashchange). */
  function remember() {
    const q = { limit: view.limit === 50 ? undefined : view.limit, group: view.groupChosen ? view.group : undefined };
    if (view.mode !== 'newest') q[view.mode] = view.value;
    const hash = `#/queues/${seg(queue)}/partitions/${seg(partition)}${query(q)}`;
    if (location.hash !== hash) history.replaceState(null, '', hash);
  }

  function renderSummary(p) {
    summary.replaceChildren(
      stat('First offset', num(p.firstOffset), { dataset: { stat: 'first' } }),
      stat('Head offset', num(p.headOffset), { dataset: { stat: 'head' } }),
      stat('Messages', num(p.headOffset - p.firstOffset), { dataset: { stat: 'messages' } }),
    );
  }

  function renderGroup(g) {
    groupLine.hidden = !g;
    stateHead.hidden = !g;
    if (!g) return;
    const who = g.group === '' ? 'The queue-mode group' : `Group ${g.group}`;
    groupLine.dataset.cursor = String(g.cursor);
    // the lease's own start may be below the cursor: those are consumed
    const leasedFrom = g.leased ? Math.max(g.leaseFrom, g.cursor) : 0;
    groupLine.dataset.leased = g.leased ? `${leasedFrom}-${g.leaseTo}` : '';
    groupLine.replaceChildren(h('span', null, `${who}: cursor at ${num(g.cursor)} (offsets below it are consumed)`,
      g.leased
        ? [`; leased ${num(leasedFrom)}..${num(g.leaseTo)} until `, time(g.leaseExpiresAt),
          g.acked.length ? `, of which acked: ${g.acked.map(num).join(', ')}` : '']
        : '; no live lease', '.'));
  }

  function headersCell(hs) {
    const keys = hs ? Object.keys(hs) : [];
    if (!keys.length) return h('td', null, h('span', { class: 'muted' }, '–'));
    return h('td', { class: 'headers' }, h('ul', { class: 'cursor-list' }, keys.map((k) => h('li', null, h('code', null, k), ' ', hs[k]))));
  }

  function previewText(p) {
    if (p.kind === 'sealed' || p.kind === 'large') return p.note;
    return p.truncated ? `${p.preview}…` : p.preview;
  }

  /** The whole payload, read when its row is opened. */
  async function openPayload(m, pre) {
    pre.textContent = 'Reading…';
    try {
      const whole = await api(`${base}/${m.offset}`);
      if (!ctx.live()) return;
      const p = whole.payload;
      if (p.value !== undefined) pre.textContent = JSON.stringify(p.value, null, 2);
      else if (p.base64 !== undefined) pre.textContent = `base64: ${p.base64}`;
      else pre.textContent = p.note || p.preview;
      pre.dataset.loaded = p.kind;
    } catch (err) {
      if (ctx.live()) pre.textContent = `Could not read the payload: ${err.message}`;
    }
  }

  function payloadCell(m) {
    const p = m.payload;
    const pre = h('pre', { class: 'payload-full', tabindex: '0' });
    const details = h('details', null,
      h('summary', null, h('span', { class: 'badge kind', dataset: { kind: p.kind } }, p.sealedWith && p.kind !== 'sealed' ? `${p.kind}, sealed ${p.sealedWith}` : p.kind), ' ',
        h('code', null, previewText(p)), h('span', { class: 'muted' }, ` ${bytes(m.payloadBytes)}`)),
      pre,
      h('p', { class: 'muted small' }, `message ${m.messageId}`, m.producer ? ` · pushed by ${m.producer}` : '',
        m.failures ? ` · ${num(m.failures)} failed deliveries` : ''));
    details.addEventListener('toggle', () => {
      if (details.open && !pre.dataset.loaded) openPayload(m, pre);
    });
    return h('td', { class: 'payload' }, details);
  }

  function row(m, match) {
    return h('tr', { dataset: { offset: m.offset, state: m.state || '' }, class: m.offset === match ? 'match' : undefined },
      h('th', { scope: 'row', class: 'num' }, num(m.offset)),
      m.state ? h('td', null, h('span', { class: `badge state-${m.state}`, title: STATE_TEXT[m.state] }, m.state)) : null,
      h('td', { class: 'name' }, h('code', null, m.transactionId)),
      h('td', null, time(m.committedAt)),
      h('td', { class: 'name' }, m.traceId ? h('code', null, m.traceId) : h('span', { class: 'muted' }, '–')),
      headersCell(m.headers),
      payloadCell(m));
  }

  function renderNote(p) {
    const parts = [];
    if (p.match) {
      const m = p.match;
      if (m.found) {
        parts.push(`Transaction id ${m.transactionId} is at offset ${num(m.offset)}` +
          (m.searchedBy === 'dedup' ? ' (found through the deduplication index).' : ` (found among the newest ${num(m.searchedMessages)} messages).`));
      }
    }
    if (p.note) parts.push(`${p.note.charAt(0).toUpperCase()}${p.note.slice(1)}.`);
    note.textContent = parts.join(' ');
    note.className = p.match && !p.match.found ? 'form-status error' : 'form-status';
  }

  async function load() {
    const s = ++seq;
    const t0 = performance.now();
    const p = await api(`${base}${query(apiQuery())}`);
    if (!ctx.live() || s !== seq) return;
    last = p;
    renderSummary(p);
    renderGroup(p.group);
    renderNote(p);
    const match = p.match && p.match.found ? p.match.offset : undefined;
    body.replaceChildren(...p.messages.map((m) => row(m, match)));
    if (!p.messages.length) {
      body.replaceChildren(h('tr', null, h('td', { colspan: '7', class: 'empty' }, 'No messages on this page.')));
    }
    const ms = p.messages;
    pageInfo.textContent = ms.length
      ? `Offsets ${num(ms[0].offset)} … ${num(ms[ms.length - 1].offset)} (${ms.length})`
      : 'No messages';
    olderBtn.disabled = p.older === undefined;
    newerBtn.disabled = p.newer === undefined;
    table.dataset.from = String(p.from);
    table.dataset.ms = String(Math.round(performance.now() - t0));
    remember();
    el.dataset.ready = 'true';
  }

  async function go(change) {
    change();
    try {
      await load();
    } catch (err) {
      if (!ctx.live()) return;
      note.className = 'form-status error';
      note.textContent = `Could not read the messages: ${err.message} (${err.code}).`;
    }
  }

  async function loadGroups() {
    const q = await api(`queues/${seg(queue)}`);
    if (!ctx.live()) return;
    const groups = (q.groups || []).map((g) => g.group);
    // the options carry a "g:" prefix, so that the queue-mode group "" is not "(none)"
    groupSelect.replaceChildren(h('option', { value: '' }, '(none)'),
      ...groups.map((g) => h('option', { value: `g:${g}`, selected: view.groupChosen && g === view.group }, g === '' ? '(queue mode)' : g)));
  }

  modeSelect.addEventListener('change', () => {
    valueHint();
    if (modeSelect.value === 'at' && !valueInput.value) valueInput.value = new Date(Date.now() - 3600_000).toISOString().slice(0, 19) + 'Z';
  });
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    go(() => {
      view.mode = modeSelect.value;
      view.value = valueInput.value.trim();
      view.limit = Number(sizeSelect.value);
      view.groupChosen = groupSelect.value !== '';
      view.group = view.groupChosen ? groupSelect.value.slice(2) : '';
    });
  });
  olderBtn.addEventListener('click', () => go(() => {
    view.mode = 'from';
    view.value = String(last.older);
    modeSelect.value = 'from';
    valueInput.value = view.value;
    valueHint();
  }));
  newerBtn.addEventListener('click', () => go(() => {
    view.mode = 'from';
    view.value = String(last.newer);
    modeSelect.value = 'from';
    valueInput.value = view.value;
    valueHint();
  }));
  newestBtn.addEventListener('click', () => go(() => {
    view.mode = 'newest';
    view.value = '';
    modeSelect.value = 'newest';
    valueInput.value = '';
    valueHint();
  }));

  return {
    el,
    title: `Partition ${partition} of ${queue}`,
    // read once, then on demand: a page of messages does not poll
    polled: false,
    async refresh() {
      await Promise.all([load(), loadGroups()]);
    },
  };
}
