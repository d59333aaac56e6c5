// The dashboard: hash routes, one page at a time, each refreshed every
// refreshMs (from api/info) without reloading, under a banner while any
// cluster maintenance is on.
import { api, ApiError, getToken, getTokenRole, getTokenScope, setToken } from './api.js';
import { h, duration, time } from './dom.js';
import * as queues from './pages/queues.js';
import * as queue from './pages/queue.js';
import * as dlq from './pages/dlq.js';
import * as spool from './pages/spool.js';
import * as cluster from './pages/cluster.js';
import * as messages from './pages/messages.js';
import * as database from './pages/database.js';

const ROUTES = [
  { re: /^\/(queues)?$/, page: queues, nav: 'queues' },
  { re: /^\/queues\/([^/]+)\/partitions\/([^/]+)$/, page: messages, nav: 'queues' },
  { re: /^\/queues\/(.+)$/, page: queue, nav: 'queues' },
  { re: /^\/dlq$/, page: dlq, nav: 'dlq' },
  { re: /^\/spool$/, page: spool, nav: 'spool' },
  { re: /^\/cluster$/, page: cluster, nav: 'cluster' },
  { re: /^\/database$/, page: database, nav: 'database' },
];

const main = document.getElementById('main');
const banner = document.getElementById('banner');
const maintenanceBanner = document.getElementById('maintenance-banner');

/** What api/info said; refreshMs until then is the documented default. */
const info = { sidecarId: '', version: '', uptimeSeconds: 0, writes: 'token', reads: 'open', refreshMs: 2000, loadedAt: Date.now() };

let generation = 0;
let current = null;
let timer = 0;

function parseHash() {
  const raw = location.hash.replace(/^#/, '') || '/queues';
  const i = raw.indexOf('?');
  const path = i < 0 ? raw : raw.slice(0, i);
  return { path, query: new URLSearchParams(i < 0 ? '' : raw.slice(i + 1)) };
}

function showBanner(text) {
  if (text) {
    banner.textContent = text;
    banner.hidden = false;
  } else if (!banner.hidden) {
    banner.hidden = true;
    banner.textContent = '';
  }
}

let maintenanceShown = '';

/** The maintenance banner, from api/cluster's `maintenance` (absent: none). */
function showMaintenance(m) {
  const on = Boolean(m && (m.push || m.pop));
  // redrawn only on a change: a live region re-read every refresh is noise
  const key = on ? JSON.stringify([m.push, m.pushSince, m.pop, m.popSince]) : '';
  if (key === maintenanceShown) return;
  maintenanceShown = key;
  if (!on) {
    maintenanceBanner.hidden = true;
    maintenanceBanner.replaceChildren();
    return;
  }
  const since = (t) => (t ? [' since ', time(t)] : '');
  maintenanceBanner.replaceChildren(h('div', null,
    h('strong', null, 'Maintenance is on. '),
    m.push ? h('span', { dataset: { maintenance: 'push' } }, 'Push maintenance', since(m.pushSince), ': every sidecar spools pushes instead of storing them. ') : null,
    m.pop ? h('span', { dataset: { maintenance: 'pop' } }, 'Pop maintenance', since(m.popSince), ': pops deliver nothing, acks keep working. ') : null,
    h('a', { href: '#/cluster' }, 'Turn it off on the cluster page')));
  maintenanceBanner.hidden = false;
}

/** Reads the maintenance state for the banner; api/cluster is cheap. */
async function refreshMaintenance() {
  try {
    const c = await api('cluster');
    showMaintenance(c.maintenance);
  } catch {
    // the page's own banner says when the sidecar does not answer
  }
}

function route() {
  const gen = ++generation;
  clearTimeout(timer);
  if (current && current.destroy) current.destroy();
  current = null;
  showBanner('');
  const { path, query } = parseHash();
  const r = ROUTES.find((x) => x.re.test(path));
  for (const a of document.querySelectorAll('[data-nav]')) {
    if (r && a.dataset.nav === r.nav) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  if (!r) {
    main.replaceChildren(h('h1', { tabindex: '-1' }, 'Not found'), h('p', null, 'No such page. ', h('a', { href: '#/queues' }, 'Go to the queues.')));
    document.title = 'Not found · queenside';
    return;
  }
  const m = r.re.exec(path);
  const ctx = {
    info,
    query,
    param: m[1] && r.page !== queues ? safeDecode(m[1]) : undefined,
    params: m.slice(1).map(safeDecode),
    live: () => gen === generation,
    setMaintenance: showMaintenance,
    navigate: (hash) => {
      location.hash = hash;
    },
  };
  const page = r.page.create(ctx);
  current = page;
  main.replaceChildren(page.el);
  document.title = `${page.title} · queenside`;
  // after a move between pages, a screen reader starts at the new heading
  if (gen > 1) page.el.querySelector('h1')?.focus({ preventScroll: true });
  tick(gen, page);
}

function safeDecode(s) {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

async function tick(gen, page) {
  if (gen !== generation) return;
  if (!document.hidden || !page.polled) {
    try {
      // the cluster page reads the maintenance state itself
      await Promise.all([page.refresh(), page.readsMaintenance ? null : refreshMaintenance()]);
      if (gen === generation) showBanner('');
    } catch (err) {
      if (gen !== generation) return;
      showBanner(err instanceof ApiError ? `Could not load this page: ${err.message} (${err.code}).` : `Could not show this page: ${err.message}`);
    }
  }
  if (gen !== generation || page.polled === false) return;
  timer = setTimeout(() => tick(gen, page), info.refreshMs);
}

function renderSidecar() {
  const el = document.getElementById('sidecar-info');
  if (!info.sidecarId) {
    el.replaceChildren();
    return;
  }
  const up = info.uptimeSeconds + (Date.now() - info.loadedAt) / 1000;
  el.replaceChildren(
    h('span', { title: 'sidecar id' }, info.sidecarId),
    h('span', { class: 'muted' }, ` · ${info.version} · up ${duration(up)}`),
  );
}

function renderTokenButton() {
  const b = document.getElementById('token-button');
  const role = getTokenRole();
  const scope = getTokenScope();
  delete b.dataset.scope;
  if (role && scope) {
    // a scoped token: its pages show its queues only, and the API refuses
    // what its scope does not give, saying so
    b.textContent = `${role === 'admin' ? 'Admin' : 'Read'} token ✓ (scoped)`;
    b.title = `A ${role} token is kept for this tab, scoped to ${scope}: the pages show its queues only.`;
    b.dataset.state = role === 'admin' ? 'set' : 'read';
    b.dataset.scope = scope;
  } else if (role === 'admin') {
    b.textContent = 'Admin token ✓';
    b.title = 'An admin token is kept for this tab: it may read and write.';
    b.dataset.state = 'set';
  } else if (role === 'read') {
    b.textContent = 'Read token ✓';
    b.title = 'A read token is kept for this tab: writes need an admin token.';
    b.dataset.state = 'read';
  } else if (info.reads === 'token') {
    b.textContent = 'Token needed';
    b.title = 'This sidecar\'s API answers only requests that carry a token.';
    b.dataset.state = 'needed';
  } else if (info.writes === 'disabled') {
    b.textContent = 'Writes disabled';
    b.title = 'This sidecar was started without --admin-token-file: every write is refused.';
    b.dataset.state = 'disabled';
  } else {
    b.textContent = 'Admin token';
    b.title = 'Writes need an admin token.';
    b.dataset.state = 'unset';
  }
}

/** The dialog's opening line: what the sidecar asks for and what is kept. */
function tokenSituation() {
  let kept = { admin: 'An admin token is kept for this tab.', read: 'A read token is kept for this tab: writes need an admin token.' }[getTokenRole()] || 'No token is kept.';
  if (getTokenScope()) kept += ` Its scope is ${getTokenScope()}.`;
  if (info.reads === 'token') return `This sidecar's pages need a token (a read or an admin token). ${kept}`;
  if (info.writes === 'disabled') return 'This sidecar was started without --admin-token-file: writes are disabled whatever the token.';
  return kept;
}

function setupTokenDialog() {
  const dialog = document.getElementById('token-dialog');
  const form = document.getElementById('token-form');
  const input = document.getElementById('token-input');
  const status = document.getElementById('token-status');
  document.getElementById('token-button').addEventListener('click', openTokenDialog);
  form.addEventListener('submit', async (ev) => {
    const action = ev.submitter ? ev.submitter.value : 'check';
    if (action === 'cancel') return; // the dialog closes by itself
    ev.preventDefault();
    if (action === 'forget') {
      setToken('');
      dialog.close();
      return;
    }
    const token = input.value.trim();
    if (!token) {
      status.textContent = 'Enter the token first.';
      status.className = 'form-status error';
      return;
    }
    status.textContent = 'Checking…';
    status.className = 'form-status';
    try {
      const auth = await api('auth', { token });
      setToken(token, auth);
      input.value = '';
      status.textContent = 'Token accepted.';
      dialog.close();
      // the page held back for want of a token is shown now; any other
      // page reads with the new token from its next refresh
      if (document.getElementById('token-needed')) route();
    } catch (err) {
      status.className = 'form-status error';
      if (err.status === 403 && err.code === 'writes_disabled') {
        status.textContent = 'Refused (403 writes_disabled): this sidecar was started without --admin-token-file, so writes are disabled.';
      } else if (err.status === 403) {
        status.textContent = `Refused (403 ${err.code}): this is not a token of this sidecar.`;
      } else {
        status.textContent = `Could not check the token: ${err.message}`;
      }
    }
  });
  window.addEventListener('queenside:token', renderTokenButton);
}

function openTokenDialog() {
  const dialog = document.getElementById('token-dialog');
  const input = document.getElementById('token-input');
  const status = document.getElementById('token-status');
  input.value = '';
  status.textContent = tokenSituation();
  status.className = 'form-status';
  if (!dialog.open) dialog.showModal();
  input.focus();
}

async function loadInfo() {
  try {
    const i = await api('info');
    Object.assign(info, i, { loadedAt: Date.now() });
    if (!(info.refreshMs >= 250)) info.refreshMs = 2000;
  } catch {
    // the pages show the sidecar's absence themselves
  }
  renderSidecar();
  renderTokenButton();
}

/**
 * A sign-in link (queenside dev prints one: .../#token=...) keeps its
 * token for the tab, as the token button would, and leaves the address
 * bar at once, so that it is neither bookmarked nor shared. A token this
 * sidecar refuses is forgotten; the token button asks for another.
 */
async function signInFromLink() {
  const m = /^#token=([^&]+)$/.exec(location.hash);
  if (!m) return;
  history.replaceState(null, '', `${location.pathname}${location.search}#/queues`);
  const token = safeDecode(m[1]);
  try {
    const auth = await api('auth', { token });
    setToken(token, auth);
  } catch {
    setToken('');
  }
}

await signInFromLink();
setupTokenDialog();
renderTokenButton();
window.addEventListener('hashchange', route);
setInterval(renderSidecar, 30_000);
await loadInfo();
if (info.reads === 'token' && !getToken()) {
  // a sidecar whose reads need a token shows nothing until it is given one
  main.replaceChildren(h('h1', { tabindex: '-1' }, 'Token needed'),
    h('p', { id: 'token-needed' }, 'This sidecar was started with --read-token-file: its pages need a read or an admin token.'));
  openTokenDialog();
} else {
  route();
}
