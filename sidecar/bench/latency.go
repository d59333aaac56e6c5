package bench

import (
	"slices"
	"time"
)

// LatencySummary describes a set of durations. Every duration is kept
// until the end of a scenario, so the percentiles are exact, not estimated
// from buckets.
type LatencySummary struct {
	Count  int     `json:"count"`
	P50Ms  float64 `json:"p50Ms"`
	P99Ms  float64 `json:"p99Ms"`
	MaxMs  float64 `json:"maxMs"`
	MeanMs float64 `json:"meanMs"`
}

// summarize sorts d in place and summarizes it; nil when d is empty.
func summarize(d []time.Duration) *LatencySummary {
	if len(d) == 0 {
		return nil
	}
	slices.Sort(d)
	var sum time.Duration
	for _, v := range d {
		sum += v
	}
	return &LatencySummary{
		Count:  len(d),
		P50Ms:  ms(percentile(d, 0.50)),
		P99Ms:  ms(percentile(d, 0.99)),
		MaxMs:  ms(d[len(d)-1]),
		MeanMs: ms(sum / time.Duration(len(d))),
	}
}

// percentile is the nearest-rank percentile of sorted d: the smallest value
// that at least the fraction q of the values do not exceed.
func percentile(sorted []time.Duration, q float64) time.Duration {
	rank := int(q*float64(len(sorted))+0.999999999) - 1
	return sorted[max(0, min(rank, len(sorted)-1))]
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }
