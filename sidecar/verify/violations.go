package verify

import (
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Violation kinds: each one fails the run.
const (
	ViolationDuplicate      = "duplicate"            // a second stored message for one sequence number
	ViolationGap            = "gap"                  // a pushed sequence number missing after the drain
	ViolationOrder          = "order"                // a lower sequence number at a higher offset
	ViolationDeliveryOrder  = "delivery-order"       // an offset delivered before a lower one ever was
	ViolationMismatch       = "mismatch"             // one offset delivered with two different events
	ViolationUnflagged      = "unflagged-redelivery" // an offset delivered again without redelivered: true
	ViolationCorrupt        = "corrupt"              // a message whose partition, payload and id disagree
	ViolationUnknown        = "unknown-event"        // a sequence number the loader never pushed
	ViolationUndelivered    = "undelivered"          // stored messages the group never received
	ViolationExpiredLease   = "expired-lease-accepted"
	ViolationNotRedelivered = "not-redelivered" // abandoned messages that never came again
	ViolationSpooledTxn     = "transaction-spooled"
	ViolationSidecarCrash   = "sidecar-crash" // a sidecar exited without being told to
	ViolationSpoolLeft      = "spool-not-empty"
	ViolationNotDrained     = "not-drained"
)

// Violation is one thing the run found wrong, with where it was found.
type Violation struct {
	Kind      string  `json:"kind"`
	Queue     int     `json:"queue,omitempty"` // 1-based; 0 when not about a queue
	Consumer  string  `json:"consumer,omitempty"`
	Partition string  `json:"partition,omitempty"`
	Seqs      []int64 `json:"seqs,omitempty"`
	Offsets   []int64 `json:"offsets,omitempty"`
	Detail    string  `json:"detail"`
}

func (v Violation) String() string {
	var b strings.Builder
	b.WriteString(v.Kind)
	if v.Consumer != "" {
		fmt.Fprintf(&b, " in queue %d (%s)", v.Queue, v.Consumer)
	}
	if v.Partition != "" {
		fmt.Fprintf(&b, " partition %s", v.Partition)
	}
	if len(v.Seqs) > 0 {
		fmt.Fprintf(&b, " seq %s", formatNumbers(v.Seqs))
	}
	if len(v.Offsets) > 0 {
		fmt.Fprintf(&b, " offset %s", formatNumbers(v.Offsets))
	}
	if v.Detail != "" {
		b.WriteString(": " + v.Detail)
	}
	return b.String()
}

// formatNumbers prints runs of consecutive numbers as ranges: 3,4,5,9 is
// "3-5,9".
func formatNumbers(ns []int64) string {
	var parts []string
	for i := 0; i < len(ns); {
		j := i
		for j+1 < len(ns) && ns[j+1] == ns[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", ns[i], ns[j]))
		} else {
			parts = append(parts, fmt.Sprint(ns[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// maxKeptViolations bounds the list kept in memory and in the report;
// every violation is still counted.
const maxKeptViolations = 2000

// violationLog collects violations from every goroutine of the run.
type violationLog struct {
	mu     sync.Mutex
	kept   []Violation
	counts map[string]int64
}

func newViolationLog() *violationLog { return &violationLog{counts: map[string]int64{}} }

func (l *violationLog) add(v Violation) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.counts[v.Kind]++
	if len(l.kept) < maxKeptViolations {
		l.kept = append(l.kept, v)
	}
}

func (l *violationLog) total() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var n int64
	for _, c := range l.counts {
		n += c
	}
	return n
}

func (l *violationLog) snapshot() ([]Violation, map[string]int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	counts := make(map[string]int64, len(l.counts))
	for k, v := range l.counts {
		counts[k] = v
	}
	kept := append([]Violation(nil), l.kept...)
	sort.SliceStable(kept, func(i, j int) bool { return kept[i].Queue < kept[j].Queue })
	return kept, counts
}
