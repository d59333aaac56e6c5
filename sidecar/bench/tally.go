package bench

import (
	"fmt"
	"slices"
	"sync"
	"time"

	queenside "github.com/queenside/queenside/clients/go"
)

// maxSamples bounds the error messages kept per scenario: enough to see
// what went wrong without flooding the report when everything fails.
const maxSamples = 5

// tally is what one worker observed. Each worker owns its tally, so
// recording takes no lock; the tallies are merged once the workers end.
type tally struct {
	requests    map[string][]time.Duration // by operation
	delivery    []time.Duration            // push time in the payload to the pop that returned it
	afterCommit []time.Duration            // commit time of the message to the pop that returned it
	messages    int64                      // pushed and queued, or delivered
	errors      int64
	samples     []string
	redelivered int64
	emptyPops   int64
	pushed      int64 // by the producers of a scenario that also consumes
	// partitions, when not nil, collects the partitions delivered from.
	partitions   map[string]struct{}
	lastDelivery time.Time
	// shared, when not nil, also receives every delivery time, for a
	// watcher that reads them while the workers run (the soak's windows).
	shared *deliveryLog
}

// deliveryLog gathers delivery times from several workers; take empties it.
type deliveryLog struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *deliveryLog) add(d []time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d...)
	l.mu.Unlock()
}

func (l *deliveryLog) take() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	d := l.d
	l.d = nil
	return d
}

func newTally() *tally { return &tally{requests: map[string][]time.Duration{}} }

// took records one request of op that started at start and has just ended.
func (t *tally) took(op string, start time.Time) {
	t.requests[op] = append(t.requests[op], time.Since(start))
}

// failf counts one error and keeps its message if there is room.
func (t *tally) failf(format string, args ...any) {
	t.errors++
	msg := fmt.Sprintf(format, args...)
	if len(t.samples) < maxSamples && !slices.Contains(t.samples, msg) {
		t.samples = append(t.samples, msg)
	}
}

// delivered counts messages a pop returned at the moment at, and how long
// each took from its push.
func (t *tally) delivered(msgs []queenside.Message, at time.Time) {
	t.messages += int64(len(msgs))
	if len(msgs) > 0 {
		t.lastDelivery = at
	}
	from := len(t.delivery)
	for _, m := range msgs {
		if t.partitions != nil {
			t.partitions[m.Partition] = struct{}{}
		}
		if sent, ok := sentAt(m.Payload); ok {
			t.delivery = append(t.delivery, at.Sub(sent))
		}
		if !m.CommittedAt.IsZero() {
			t.afterCommit = append(t.afterCommit, at.Sub(m.CommittedAt))
		}
		if m.Redelivered {
			t.redelivered++
		}
	}
	if t.shared != nil {
		t.shared.add(t.delivery[from:])
	}
}

// merge folds others into t.
func (t *tally) merge(others ...*tally) *tally {
	for _, o := range others {
		for op, d := range o.requests {
			t.requests[op] = append(t.requests[op], d...)
		}
		t.delivery = append(t.delivery, o.delivery...)
		t.afterCommit = append(t.afterCommit, o.afterCommit...)
		t.messages += o.messages
		t.errors += o.errors
		t.redelivered += o.redelivered
		t.emptyPops += o.emptyPops
		t.pushed += o.pushed
		if o.partitions != nil {
			if t.partitions == nil {
				t.partitions = map[string]struct{}{}
			}
			for p := range o.partitions {
				t.partitions[p] = struct{}{}
			}
		}
		if o.lastDelivery.After(t.lastDelivery) {
			t.lastDelivery = o.lastDelivery
		}
		for _, s := range o.samples {
			if len(t.samples) < maxSamples && !slices.Contains(t.samples, s) {
				t.samples = append(t.samples, s)
			}
		}
	}
	return t
}

// tallies makes n fresh tallies, one per worker.
func tallies(n int) []*tally {
	ts := make([]*tally, n)
	for i := range ts {
		ts[i] = newTally()
	}
	return ts
}
