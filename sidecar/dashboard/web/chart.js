// A live line chart of a few named series over the last minutes, drawn by
// uPlot (vendor/uplot, loaded by index.html as the global uPlot). It starts
// from the sidecar's history (addAll, history.js) and goes on with live
// readings (add). A series that appears later (a new group) rebuilds the
// chart with its past as gaps. The container's data-points and data-since
// (seconds) say what is drawn.

const COLORS = ['#2563eb', '#d97706', '#059669', '#db2777', '#7c3aed', '#0891b2', '#65a30d', '#dc2626'];
const WINDOW_S = 900; // the chart shows the last 15 minutes, as long as the history
const MAX_POINTS = 600; // 15 minutes of live readings 2 s apart, with room
const MIN_SPAN_S = 60; // a young chart still spans a minute
const HEIGHT = 200;

export class LiveChart {
  /**
   * @param {HTMLElement} container where the chart goes (already in the page)
   * @param {{label: string, unit?: string}} opts
   */
  constructor(container, { label, unit = '' }) {
    this.container = container;
    this.label = label;
    this.unit = unit;
    this.keys = []; // series names, in order of appearance
    this.names = new Map(); // key → legend text
    this.xs = [];
    this.ys = []; // one array per key, aligned with xs
    this.plot = null;
    this.observer = new ResizeObserver(() => {
      if (this.plot) this.plot.setSize({ width: this.width(), height: HEIGHT });
    });
    this.observer.observe(container);
  }

  width() {
    return Math.max(200, this.container.clientWidth);
  }

  /**
   * Adds one live reading; one without any value is left out (nothing to
   * draw yet).
   * @param {number} t seconds since the epoch
   * @param {Map<string, number|null>} values by series key
   * @param {(key: string) => string} [name] legend text of a key
   */
  add(t, values, name = (k) => k) {
    if (![...values.values()].some((v) => typeof v === 'number' && !Number.isNaN(v))) return;
    this.draw(this.push(t, values, name));
  }

  /**
   * Adds readings, oldest first, and draws once: a reading without any
   * value stays as a gap (the history's gaps are times nothing was read).
   * @param {Array<[number, Map<string, number|null>]>} readings
   * @param {(key: string) => string} [name] legend text of a key
   */
  addAll(readings, name = (k) => k) {
    let rebuild = false;
    for (const [t, values] of readings) rebuild = this.push(t, values, name) || rebuild;
    this.draw(rebuild);
  }

  /** Adds a reading without drawing; says whether a new series appeared. */
  push(t, values, name) {
    let rebuild = false;
    for (const key of values.keys()) {
      if (!this.names.has(key)) {
        this.keys.push(key);
        this.names.set(key, name(key));
        this.ys.push(this.xs.map(() => null));
        rebuild = true;
      }
    }
    if (this.xs.length && t <= this.xs[this.xs.length - 1]) return rebuild; // a reading out of order
    this.xs.push(t);
    this.keys.forEach((key, i) => {
      const v = values.get(key);
      this.ys[i].push(v === undefined || v === null || Number.isNaN(v) ? null : v);
    });
    while (this.xs.length > MAX_POINTS || (this.xs.length > 1 && this.xs[0] < t - WINDOW_S)) {
      this.xs.shift();
      for (const y of this.ys) y.shift();
    }
    return rebuild;
  }

  draw(rebuild) {
    if (!this.xs.length) return;
    if (rebuild || !this.plot) this.build();
    else this.plot.setData([this.xs, ...this.ys]);
    this.container.dataset.points = String(this.xs.length);
    this.container.dataset.since = String(this.xs[0]);
  }

  build() {
    if (this.plot) this.plot.destroy();
    if (typeof uPlot !== 'function') return;
    const unit = this.unit;
    const xs = this.xs;
    const opts = {
      width: this.width(),
      height: HEIGHT,
      legend: { show: true, live: false },
      cursor: { drag: { x: false, y: false } },
      scales: {
        x: { time: true, range: () => [Math.min(xs[0], xs[xs.length - 1] - MIN_SPAN_S), xs[xs.length - 1]] },
        y: { range: (u, min, max) => [0, Math.max(1, (max || 0) * 1.1)] },
      },
      axes: [
        { stroke: '#475569', grid: { stroke: '#e2e8f0' }, space: 90, values: (u, ticks) => ticks.map(clock) },
        { stroke: '#475569', grid: { stroke: '#e2e8f0' }, size: 60, values: (u, ticks) => ticks.map((v) => fmtTick(v)) },
      ],
      series: [
        { label: 'time' },
        ...this.keys.map((key, i) => ({
          label: this.names.get(key),
          stroke: COLORS[i % COLORS.length],
          width: 2,
          value: (u, v) => (v === null || v === undefined ? '–' : `${fmtTick(v)}${unit}`),
        })),
      ],
    };
    this.plot = new uPlot(opts, [this.xs, ...this.ys], this.container);
    this.plot.root.setAttribute('aria-label', this.label);
    this.plot.root.setAttribute('role', 'img');
  }

  destroy() {
    this.observer.disconnect();
    if (this.plot) this.plot.destroy();
    this.plot = null;
  }
}

function clock(t) {
  const d = new Date(t * 1000);
  return [d.getHours(), d.getMinutes(), d.getSeconds()].map((n) => String(n).padStart(2, '0')).join(':');
}

function fmtTick(v) {
  if (v === null || v === undefined) return '';
  if (Math.abs(v) >= 1e6) return `${+(v / 1e6).toFixed(1)}M`;
  if (Math.abs(v) >= 1e4) return `${+(v / 1e3).toFixed(1)}k`;
  return String(Number(v.toFixed(2)));
}
