// A small helper to build DOM nodes, and the formatting the pages share.

import { getTokenScope } from './api.js';

const PROPS = new Set(['value', 'checked', 'selected', 'disabled', 'hidden', 'open', 'indeterminate']);

/** h('td', {class: 'num'}, 'text', node, [more]) */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  if (attrs) {
    for (const [k, v] of Object.entries(attrs)) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') el.className = v;
      else if (k === 'dataset') Object.assign(el.dataset, v);
      else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
      else if (PROPS.has(k)) el[k] = v;
      else el.setAttribute(k, v === true ? '' : String(v));
    }
  }
  add(el, children);
  return el;
}

function add(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) add(el, c);
    else el.append(c instanceof Node ? c : String(c));
  }
}

const nf = new Intl.NumberFormat('en-US');

/** 1234567 → "1,234,567"; absent → "–" */
export function num(n) {
  return n === undefined || n === null ? '–' : nf.format(n);
}

/** A per-second rate: "…" until two readings exist. */
export function rate(r) {
  if (r === undefined || r === null || Number.isNaN(r)) return '…';
  if (r === 0) return '0';
  if (r < 10) return r.toFixed(1);
  return nf.format(Math.round(r));
}

export function bytes(n) {
  if (n === undefined || n === null) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return i === 0 ? `${v} B` : `${v.toFixed(v < 10 ? 1 : 0)} ${units[i]}`;
}

/** Seconds as "45 s", "3 min", "2 h 5 min", "4 d 3 h". */
export function duration(seconds) {
  if (seconds === undefined || seconds === null) return '–';
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min`;
  const pair = (a, ua, b, ub) => (b ? `${a} ${ua} ${b} ${ub}` : `${a} ${ua}`);
  if (s < 86400) return pair(Math.floor(s / 3600), 'h', Math.floor((s % 3600) / 60), 'min');
  return pair(Math.floor(s / 86400), 'd', Math.floor((s % 86400) / 3600), 'h');
}

/** An RFC 3339 time as "2026-11-30 07:59:25 UTC" in a <time>. */
export function time(iso) {
  if (!iso) return '–';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  const text = `${d.toISOString().slice(0, 19).replace('T', ' ')} UTC`;
  return h('time', { datetime: iso, title: iso }, text);
}

/** "12 s ago" from an RFC 3339 time, against now (milliseconds). */
export function ago(iso, now = Date.now()) {
  if (!iso) return '–';
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return String(iso);
  return h('time', { datetime: iso, title: iso }, `${duration((now - t) / 1000)} ago`);
}

/** A number cell: right-aligned, the raw value in data-value for scripts. */
export function numCell(value, text, attrs = {}) {
  return h('td', { class: 'num', dataset: { value: value ?? '' }, ...attrs }, text ?? num(value));
}

/** A queue's options, compactly. */
export function optionsText(o) {
  if (!o) return '–';
  const parts = [
    `lease ${duration(o.leaseSeconds)}`,
    `retries ${num(o.retryLimit)}`,
    `dedup ${duration(o.dedupWindowSeconds)}`,
    `retention ${o.retentionSeconds ? duration(o.retentionSeconds) : 'off'}`,
    `completed ${o.completedRetentionSeconds ? duration(o.completedRetentionSeconds) : 'off'}`,
  ];
  if (o.delaySeconds) parts.push(`delay ${duration(o.delaySeconds)}`);
  if (o.maxDeliveries) parts.push(`max deliveries ${num(o.maxDeliveries)}`);
  return parts.join(' · ');
}

/** The display name of a group: the queue-mode group is "". */
export function groupName(g) {
  return g === '' ? h('span', { class: 'muted' }, '(queue mode)') : g;
}

/** A stat card: a label over a big value. */
export function stat(label, value, attrs = {}) {
  return h('div', { class: 'stat', ...attrs }, h('div', { class: 'stat-label' }, label), h('div', { class: 'stat-value' }, value));
}

/** The message shown for a refused or failed write. */
export function writeError(err) {
  if (err.status === 403 && err.code === 'writes_disabled') {
    return 'Refused (403 writes_disabled): this sidecar was started without --admin-token-file, so every write is disabled.';
  }
  if (err.status === 403 && getTokenScope()) {
    // the API names the right and the queue the kept token's scope lacks
    return `Refused (403 ${err.code}): ${err.message}.`;
  }
  if (err.status === 403) {
    return `Refused (403 ${err.code}): ${err.message}. Set an admin token with the token button at the top right.`;
  }
  return `Failed (${err.status || 'no answer'} ${err.code}): ${err.message}`;
}

/** The badge of a queue whose consumption is paused (options.consumptionPaused). */
export function pausedBadge() {
  return h('span', { class: 'badge paused', dataset: { badge: 'paused' }, title: 'Consumption paused: no group\'s pop delivers this queue until it is resumed.' }, 'paused');
}
