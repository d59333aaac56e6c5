// Dead letters counted by queue, group and error (GET api/dlq/summary):
// what is failing, and how often. A row's button filters the page by it.
import { api, query } from '../api.js';
import { h, num, time, groupName } from '../dom.js';

/** The section; pick(queue, group, error) is called by a row's button. */
export function errorSummary(ctx, pick) {
  const tbody = h('tbody');
  const el = h('section', { id: 'dlq-errors', 'aria-labelledby': 'dlq-errors-title' },
    h('h2', { id: 'dlq-errors-title' }, 'Errors by count'),
    h('div', { class: 'table-wrap' }, h('table', { class: 'data' },
      h('thead', null, h('tr', null,
        h('th', { scope: 'col' }, 'Queue'),
        h('th', { scope: 'col' }, 'Group'),
        h('th', { scope: 'col' }, 'Error'),
        h('th', { scope: 'col', class: 'num' }, 'Dead letters'),
        h('th', { scope: 'col', class: 'num' }, 'Replayed'),
        h('th', { scope: 'col' }, 'First'),
        h('th', { scope: 'col' }, 'Last'),
        h('th', { scope: 'col' }, h('span', { class: 'sr-only' }, 'Filter')))),
      tbody)));

  function row(e) {
    return h('tr', { dataset: { queue: e.queue, group: e.group, error: e.error } },
      h('td', null, h('span', { class: 'name' }, e.queue)),
      h('td', null, groupName(e.group)),
      h('td', { class: 'error-text' }, e.error || h('span', { class: 'muted' }, '(no error text)')),
      h('td', { class: 'num', dataset: { col: 'count', value: e.count } }, num(e.count)),
      h('td', { class: 'num', dataset: { col: 'replayed', value: e.replayed } }, num(e.replayed)),
      h('td', null, time(e.firstDeadAt)),
      h('td', null, time(e.lastDeadAt)),
      h('td', null, h('button', { type: 'button', onclick: () => pick(e.queue, e.group, e.error) }, 'Show these')));
  }

  return {
    el,
    async load(queue) {
      const data = await api(`dlq/summary${query({ queue })}`);
      if (!ctx.live()) return;
      const errors = data.errors || [];
      tbody.replaceChildren(...(errors.length ? errors.map(row)
        : [h('tr', null, h('td', { colspan: '8', class: 'empty' }, 'No dead letters.'))]));
      el.dataset.ready = 'true';
    },
  };
}
