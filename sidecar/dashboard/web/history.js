// The sidecar's history (api/history, API.md): what each chart draws when
// its page opens, before its live readings.
import { api, query } from './api.js';

/** api/history, with each sample's time in seconds (t) as the charts take it. */
export async function loadHistory(queue) {
  const h = await api(`history${query({ queue })}`);
  return { ...h, t: h.at.map((a) => Date.parse(a) / 1000) };
}

/**
 * Readings for LiveChart.addAll from [key, values] pairs, values aligned
 * with t (null for a gap).
 */
export function readings(t, pairs) {
  return t.map((x, i) => [x, new Map(pairs.map(([key, values]) => [key, values[i] ?? null]))]);
}
