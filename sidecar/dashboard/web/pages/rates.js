// Rates from counters: the difference of two readings over the difference
// of their `at` (API.md). A counter that went back (seek, retention) gives 0.

export class Rates {
  constructor() {
    this.prev = new Map(); // key → {t, value}
  }

  /** Records a reading and returns the rate per second, or null for the first. */
  update(key, at, value) {
    const t = Date.parse(at) / 1000;
    const p = this.prev.get(key);
    this.prev.set(key, { t, value });
    if (!p || !(t > p.t)) return p ? p.rate ?? null : null;
    const r = Math.max(0, (value - p.value) / (t - p.t));
    this.prev.get(key).rate = r;
    return r;
  }

  /** Forgets keys not in keep. */
  prune(keep) {
    for (const k of this.prev.keys()) if (!keep.has(k)) this.prev.delete(k);
  }
}

/**
 * Rates along a served counter series (api/history): values[i] read at
 * at[i]; null for the first reading and for gaps (null).
 */
export function seriesRates(at, values) {
  const rates = new Rates();
  return values.map((v, i) => (v === null ? null : rates.update('', at[i], v)));
}
