// Replay or delete every dead letter a filter matches, or those selected:
// a confirmation that states the count, then one batch a request
// (POST api/dlq/replay and api/dlq/delete with the previous answer's
// nextAfterId), the progress shown after each. A replay skips entries
// replayed already unless asked, so running it again after a stop, a
// closed tab or a failure replays only what is left.
import { api } from '../api.js';
import { h, num, writeError } from '../dom.js';
import { confirmAction } from '../confirm.js';

/**
 * The toolbar. source() says what is shown: {filter (the op's filter, with
 * queue, or null without one), count, replayedCount, selected: [id]};
 * done() is called after an action, to reload.
 */
export function bulkActions(ctx, source, done) {
  const replayAll = h('button', { type: 'button', id: 'dlq-replay-all', disabled: true }, 'Replay all matching');
  const deleteAll = h('button', { type: 'button', id: 'dlq-delete-all', class: 'danger', disabled: true }, 'Delete all matching');
  const deleteSel = h('button', { type: 'button', id: 'dlq-delete', class: 'danger', disabled: true }, 'Delete selected');
  const again = h('input', { type: 'checkbox', id: 'dlq-again' });
  const stopBtn = h('button', { type: 'button', id: 'dlq-stop', hidden: true }, 'Stop after this batch');
  const bar = h('progress', { id: 'dlq-progress', max: '1', value: '0', hidden: true });
  const status = h('div', { id: 'dlq-bulk-status', class: 'form-status', role: 'status', 'aria-live': 'polite' });
  const el = h('div', { id: 'dlq-bulk' },
    h('div', { class: 'toolbar' }, replayAll, deleteAll, deleteSel,
      h('label', { for: 'dlq-again' }, again, ' also replay those replayed already'), stopBtn),
    bar, status);
  let running = false;
  let stopping = false;

  /** Enables what the source allows; called by the page after each load. */
  function update() {
    const s = source();
    const matching = s.filter ? s.count : 0;
    const toReplay = again.checked ? matching : matching - s.replayedCount;
    replayAll.disabled = running || toReplay <= 0;
    deleteAll.disabled = running || !matching;
    replayAll.textContent = s.filter ? `Replay all matching (${num(s.count)})` : 'Replay all matching (choose a queue)';
    deleteAll.textContent = s.filter ? `Delete all matching (${num(s.count)})` : 'Delete all matching (choose a queue)';
    deleteSel.disabled = running || s.selected.length === 0;
    deleteSel.textContent = s.selected.length ? `Delete selected (${s.selected.length})` : 'Delete selected';
  }

  function show(kind, text, progress) {
    status.className = `form-status ${kind}`;
    status.textContent = text;
    if (progress) {
      bar.hidden = false;
      bar.max = Math.max(progress.total, 1);
      bar.value = Math.min(progress.done, bar.max);
      Object.assign(status.dataset, { done: progress.done, total: progress.total });
    }
  }

  /** Runs the batches of a filter until the last, or a stop. */
  async function batches(path, body, onBatch) {
    let afterId;
    for (;;) {
      const res = await api(path, { method: 'POST', body: afterId === undefined ? body : { ...body, afterId } });
      if (!ctx.live()) return false;
      onBatch(res);
      if (res.nextAfterId === undefined || res.nextAfterId === null) return true;
      if (stopping) return false;
      afterId = res.nextAfterId;
    }
  }

  async function run(confirmWith, work) {
    if (!await confirmAction(confirmWith) || !ctx.live()) return;
    running = true;
    stopping = false;
    stopBtn.hidden = false;
    update();
    try {
      await work();
    } catch (err) {
      if (ctx.live()) show('error', writeError(err));
    } finally {
      running = false;
      stopBtn.hidden = true;
      if (ctx.live()) {
        update();
        await done();
      }
    }
  }

  replayAll.addEventListener('click', () => {
    const s = source();
    const includeReplayed = again.checked;
    const total = includeReplayed ? s.count : s.count - s.replayedCount;
    const skipped = includeReplayed ? 0 : s.replayedCount;
    run({
      title: `Replay ${num(total)} dead letters of queue ${s.filter.queue}?`,
      text: `Each of the ${num(total)} dead letters matching this filter is pushed again into its partition as a new message, delivered to every group.`
        + (skipped ? ` ${num(skipped)} replayed already will be skipped.` : ''),
      confirm: `Replay ${num(total)}`,
    }, async () => {
      const sum = { replayed: 0, skipped: 0, failed: 0 };
      const body = { ...s.filter, includeReplayed };
      show('', `Replaying ${num(total)}…`, { done: 0, total: s.count });
      const finished = await batches('dlq/replay', body, (res) => {
        for (const k of Object.keys(sum)) sum[k] += res[k] || 0;
        const text = `Replayed ${num(sum.replayed)} · skipped ${num(sum.skipped)} as replayed already · failed ${num(sum.failed)}`;
        show(sum.failed ? 'error' : '', text, { done: sum.replayed + sum.skipped + sum.failed, total: s.count });
      });
      if (ctx.live()) {
        status.className = `form-status ${sum.failed ? 'error' : 'ok'}`;
        status.dataset.finished = String(finished);
        status.prepend(finished ? 'Done. ' : 'Stopped; replaying again goes on where this left off. ');
      }
    });
  });

  deleteAll.addEventListener('click', () => {
    const s = source();
    run({
      title: `Delete ${num(s.count)} dead letters of queue ${s.filter.queue}?`,
      text: `The ${num(s.count)} dead letters matching this filter are deleted for good; their messages are not replayed.`,
      confirm: `Delete ${num(s.count)}`,
    }, async () => {
      let deleted = 0;
      show('', `Deleting ${num(s.count)}…`, { done: 0, total: s.count });
      const finished = await batches('dlq/delete', s.filter, (res) => {
        deleted += res.deleted || 0;
        show('', `Deleted ${num(deleted)}`, { done: deleted, total: s.count });
      });
      if (ctx.live()) {
        status.className = 'form-status ok';
        status.dataset.finished = String(finished);
        status.prepend(finished ? 'Done. ' : 'Stopped. ');
      }
    });
  });

  deleteSel.addEventListener('click', () => {
    const ids = source().selected;
    run({
      title: `Delete ${num(ids.length)} dead letters?`,
      text: `The ${num(ids.length)} selected dead letters are deleted for good; their messages are not replayed.`,
      confirm: `Delete ${num(ids.length)}`,
    }, async () => {
      const res = await api('dlq/delete', { method: 'POST', body: { ids } });
      if (!ctx.live()) return;
      show('ok', `Deleted ${num(res.deleted)} of ${num(ids.length)}.`, { done: res.deleted, total: ids.length });
      status.dataset.finished = 'true';
    });
  });

  again.addEventListener('change', update);
  stopBtn.addEventListener('click', () => {
    stopping = true;
    stopBtn.hidden = true;
  });

  return { el, update, again: () => again.checked };
}
