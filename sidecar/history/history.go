// Package history keeps the last minutes of what the dashboard's charts
// show, so that a chart opened after something went wrong starts with the
// minutes before it. Memory is fixed whatever the number of queues and
// groups: Capacity samples of at most MaxQueues queues and MaxGroups groups
// of each, allocated as a queue or group first appears.
package history

import (
	"math"
	"sort"
	"sync"
	"time"
)

const (
	// DefaultInterval and Capacity keep 15 minutes at 5-second resolution.
	DefaultInterval = 5 * time.Second
	Capacity        = 180
	// MaxQueues queues are kept, and MaxGroups groups of each: those a
	// sample lists first while there is room. A line with no value left in
	// the window is forgotten, which makes room for another.
	MaxQueues = 100
	MaxGroups = 10
)

// ValueBytes bounds the memory of the values kept: the five lines of every
// sample, and MaxQueues queues of two lines and MaxGroups lines of lag
// each. Names (at most 200 bytes each) and map overhead come on top.
const ValueBytes = (5 + MaxQueues*(2+MaxGroups)) * Capacity * 8

// Sample is one reading of what the charts show. NaN is a gap: a figure
// that was not read (the database did not answer).
type Sample struct {
	At time.Time
	// Pushed and Consumed are the counters of every queue, summed.
	Pushed, Consumed float64
	// Popped counts the messages this sidecar's pops delivered.
	Popped            float64
	DatabaseLatencyMs float64
	SpoolRecords      float64
	// Queues in the order they are wanted: while there is room, the first
	// ones not kept yet get a place.
	Queues []Queue
}

// Queue is one queue's counters and its groups' lag, groups in the order
// they are wanted.
type Queue struct {
	Name             string
	Pushed, Consumed float64
	Groups           []Group
}

// Group is one consumer group's lag.
type Group struct {
	Name string
	Lag  float64
}

// line is one series, in step with History.times: line[i] was read at
// times[i].
type line [Capacity]float64

func newLine() *line {
	var l line
	for i := range l {
		l[i] = math.NaN()
	}
	return &l
}

type queueLines struct {
	pushed, consumed *line
	groups           map[string]*groupLine
	seen             int // the number of the last sample with a value
}

type groupLine struct {
	lag  *line
	seen int
}

// History is a ring of the last Capacity samples. It is safe for
// concurrent use.
type History struct {
	interval time.Duration

	mu    sync.Mutex
	times [Capacity]time.Time
	n     int // samples recorded since the start; the next goes to n % Capacity

	pushed, consumed, popped, latency, spool *line
	queues                                   map[string]*queueLines
}

// New returns an empty history sampled every interval.
func New(interval time.Duration) *History {
	return &History{interval: interval, pushed: newLine(), consumed: newLine(), popped: newLine(), latency: newLine(), spool: newLine(),
		queues: make(map[string]*queueLines)}
}

// Interval is the time between two samples.
func (h *History) Interval() time.Duration { return h.interval }

// Record adds a sample, overwriting the oldest once Capacity are kept.
func (h *History) Record(s Sample) {
	h.mu.Lock()
	defer h.mu.Unlock()
	i := h.n % Capacity
	h.times[i] = s.At.UTC()
	h.pushed[i], h.consumed[i], h.popped[i] = s.Pushed, s.Consumed, s.Popped
	h.latency[i], h.spool[i] = s.DatabaseLatencyMs, s.SpoolRecords
	for name, q := range h.queues {
		if h.n-q.seen >= Capacity {
			delete(h.queues, name)
			continue
		}
		q.pushed[i], q.consumed[i] = math.NaN(), math.NaN()
		for gname, g := range q.groups {
			if h.n-g.seen >= Capacity {
				delete(q.groups, gname)
				continue
			}
			g.lag[i] = math.NaN()
		}
	}
	for _, sq := range s.Queues {
		q := h.queues[sq.Name]
		if q == nil {
			if len(h.queues) >= MaxQueues {
				continue
			}
			q = &queueLines{pushed: newLine(), consumed: newLine(), groups: make(map[string]*groupLine)}
			h.queues[sq.Name] = q
		}
		q.seen = h.n
		q.pushed[i], q.consumed[i] = sq.Pushed, sq.Consumed
		for _, sg := range sq.Groups {
			g := q.groups[sg.Name]
			if g == nil {
				if len(q.groups) >= MaxGroups {
					continue
				}
				g = &groupLine{lag: newLine()}
				q.groups[sg.Name] = g
			}
			g.seen = h.n
			g.lag[i] = sg.Lag
		}
	}
	h.n++
}

// Snapshot is the history, oldest sample first; every series has one
// value (or gap) per time.
type Snapshot struct {
	IntervalMs        int64          `json:"intervalMs"`
	Capacity          int            `json:"capacity"`
	At                []time.Time    `json:"at"`
	Pushed            Series         `json:"pushed"`
	Consumed          Series         `json:"consumed"`
	Popped            Series         `json:"popped"`
	DatabaseLatencyMs Series         `json:"databaseLatencyMs"`
	SpoolRecords      Series         `json:"spoolRecords"`
	Queue             *QueueSnapshot `json:"queue"`
}

// QueueSnapshot is one queue's series, groups by name.
type QueueSnapshot struct {
	Queue    string          `json:"queue"`
	Pushed   Series          `json:"pushed"`
	Consumed Series          `json:"consumed"`
	Groups   []GroupSnapshot `json:"groups"`
}

// GroupSnapshot is one group's lag.
type GroupSnapshot struct {
	Group string `json:"group"`
	Lag   Series `json:"lag"`
}

// Snapshot copies out the history, with queue's series when queue is kept
// (Queue is nil otherwise, and for queue "").
func (h *History) Snapshot(queue string) Snapshot {
	h.mu.Lock()
	defer h.mu.Unlock()
	count := min(h.n, Capacity)
	first := h.n - count
	out := Snapshot{IntervalMs: h.interval.Milliseconds(), Capacity: Capacity, At: make([]time.Time, count)}
	for k := range count {
		out.At[k] = h.times[(first+k)%Capacity]
	}
	ordered := func(l *line) Series {
		s := make(Series, count)
		for k := range count {
			s[k] = l[(first+k)%Capacity]
		}
		return s
	}
	out.Pushed, out.Consumed, out.Popped = ordered(h.pushed), ordered(h.consumed), ordered(h.popped)
	out.DatabaseLatencyMs, out.SpoolRecords = ordered(h.latency), ordered(h.spool)
	if q := h.queues[queue]; q != nil {
		qs := &QueueSnapshot{Queue: queue, Pushed: ordered(q.pushed), Consumed: ordered(q.consumed), Groups: []GroupSnapshot{}}
		for name, g := range q.groups {
			qs.Groups = append(qs.Groups, GroupSnapshot{Group: name, Lag: ordered(g.lag)})
		}
		sort.Slice(qs.Groups, func(a, b int) bool { return qs.Groups[a].Group < qs.Groups[b].Group })
		out.Queue = qs
	}
	return out
}
