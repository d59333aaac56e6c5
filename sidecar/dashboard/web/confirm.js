// A confirmation step before a write that stops work (pausing a queue,
// turning maintenance on): a modal <dialog> that says what will happen and
// resolves true only when the operator presses the confirm button.
import { h } from './dom.js';

let dialog = null;

function ensureDialog() {
  if (dialog) return dialog;
  dialog = h('dialog', { id: 'confirm-dialog', 'aria-labelledby': 'confirm-title', 'aria-describedby': 'confirm-text' },
    h('form', { method: 'dialog' },
      h('h2', { id: 'confirm-title' }),
      h('p', { id: 'confirm-text' }),
      h('div', { class: 'actions' },
        h('button', { type: 'submit', value: 'confirm', class: 'primary danger', id: 'confirm-ok' }),
        h('button', { type: 'submit', value: 'cancel', id: 'confirm-cancel' }, 'Cancel'))));
  document.body.append(dialog);
  return dialog;
}

/**
 * Asks before a write. Resolves true on the confirm button, false on
 * Cancel or Escape.
 */
export function confirmAction({ title, text, confirm }) {
  const d = ensureDialog();
  d.querySelector('#confirm-title').textContent = title;
  d.querySelector('#confirm-text').textContent = text;
  d.querySelector('#confirm-ok').textContent = confirm;
  d.returnValue = '';
  return new Promise((resolve) => {
    d.addEventListener('close', () => resolve(d.returnValue === 'confirm'), { once: true });
    d.showModal();
    // Cancel has the focus, so that a stray Enter does not stop anything
    d.querySelector('#confirm-cancel').focus();
  });
}
