package verify

import (
	"slices"
	"sync"
	"time"
)

// latencies keeps every end-to-end latency (loader push to checker
// receipt), by timeline bucket, so the report can give the whole run's
// percentiles and each interval's.
type latencies struct {
	tl *timeline
	mu sync.Mutex
	by [][]time.Duration // by bucket of the receipt
}

func newLatencies(tl *timeline) *latencies { return &latencies{tl: tl} }

func (l *latencies) add(at time.Time, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	b := l.tl.bucket(at)
	l.mu.Lock()
	defer l.mu.Unlock()
	for len(l.by) <= b {
		l.by = append(l.by, nil)
	}
	l.by[b] = append(l.by[b], ds...)
}

// LatencySummary gives percentiles in milliseconds.
type LatencySummary struct {
	Count int64   `json:"count"`
	P50Ms float64 `json:"p50Ms"`
	P99Ms float64 `json:"p99Ms"`
	MaxMs float64 `json:"maxMs"`
}

func summarize(ds []time.Duration) *LatencySummary {
	if len(ds) == 0 {
		return nil
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(q float64) float64 { return ms(s[min(len(s)-1, int(q*float64(len(s))))]) }
	return &LatencySummary{Count: int64(len(s)), P50Ms: at(0.50), P99Ms: at(0.99), MaxMs: ms(s[len(s)-1])}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// overall summarizes the whole run.
func (l *latencies) overall() *LatencySummary {
	l.mu.Lock()
	defer l.mu.Unlock()
	var all []time.Duration
	for _, b := range l.by {
		all = append(all, b...)
	}
	return summarize(all)
}

// inBucket summarizes one interval.
func (l *latencies) inBucket(b int) *LatencySummary {
	l.mu.Lock()
	defer l.mu.Unlock()
	if b >= len(l.by) {
		return nil
	}
	return summarize(l.by[b])
}
