package verify

import (
	"sync"
	"time"
)

// timeline counts what happens per interval of the run, per named series
// (the loader, each stage, the checker), for the throughput-over-time table.
type timeline struct {
	start    time.Time
	interval time.Duration

	mu     sync.Mutex
	series map[string][]int64
}

func newTimeline(start time.Time, interval time.Duration) *timeline {
	return &timeline{start: start, interval: interval, series: map[string][]int64{}}
}

func (t *timeline) bucket(at time.Time) int {
	b := int(at.Sub(t.start) / t.interval)
	return max(b, 0)
}

// add counts n for series at time at.
func (t *timeline) add(series string, at time.Time, n int64) {
	if n == 0 {
		return
	}
	b := t.bucket(at)
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.series[series]
	for len(s) <= b {
		s = append(s, 0)
	}
	s[b] += n
	t.series[series] = s
}

// count returns series' count in bucket b.
func (t *timeline) count(series string, b int) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.series[series]; b < len(s) {
		return s[b]
	}
	return 0
}

// buckets is the number of buckets any series has reached.
func (t *timeline) buckets() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, s := range t.series {
		n = max(n, len(s))
	}
	return n
}
