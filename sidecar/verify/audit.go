package verify

import (
	"fmt"
	"sync"

	queenside "github.com/queenside/queenside/clients/go"
)

// notDelivered marks an offset never delivered in partitionAudit.seqAt, and
// a sequence number never seen in offsetOf; unknownSeq marks an offset that
// carried something the loader never pushed.
const (
	notDelivered = -1
	unknownSeq   = -2
)

// auditor checks everything one queue's consumer group is delivered,
// against the definitions of the package documentation. Every consumer of
// the group records into it, so it sees the queue's deliveries in the order
// the leases allowed them.
type auditor struct {
	queue      int    // 1-based index of the queue
	consumer   string // "stage 2", or "checker" for the last queue
	total      int64  // events the loader pushes in --duration
	partitions int
	violations *violationLog
	// pushed, when set, counts the events the loader generated so far, which
	// are more than total when it pushed past --duration.
	pushed func() int64

	mu    sync.Mutex
	parts []partitionAudit
	stats AuditStats
}

// partitionAudit is what one partition of the queue has delivered so far.
// Offsets are gapless from 0 and sequence numbers run from 0, so both maps
// are slices.
type partitionAudit struct {
	seqAt     []int32  // by offset: the sequence number stored there
	delivered []uint16 // by offset: deliveries so far (saturating)
	offsetOf  []int32  // by sequence number: the first offset that carried it
	next      int64    // the lowest offset never delivered
	maxSeq    int64    // the highest sequence number delivered at a new offset
}

// AuditStats are one queue's counts.
type AuditStats struct {
	Events       int64 `json:"events"`       // what the loader pushed, all of which must arrive
	Verified     int64 `json:"verified"`     // distinct sequence numbers delivered
	Deliveries   int64 `json:"deliveries"`   // every delivery
	Redeliveries int64 `json:"redeliveries"` // deliveries of an offset delivered before
	// FlaggedRedelivered counts deliveries the sidecar marked redelivered.
	// It exceeds Redeliveries by FirstSeenFlagged: messages marked
	// redelivered that this group receives for the first time, because an
	// earlier pop leased them but its answer never arrived (its sidecar was
	// killed, or PostgreSQL crashed after the commit).
	FlaggedRedelivered int64 `json:"flaggedRedelivered"`
	FirstSeenFlagged   int64 `json:"firstSeenFlagged"`
	StoredOffsets      int64 `json:"storedOffsets"` // distinct offsets delivered
	Duplicates         int64 `json:"duplicates"`
	Gaps               int64 `json:"gaps"`
	// ReportedLost counts the sequence numbers that never arrived because
	// a damaged spool record lost them here or in an earlier queue, each
	// reported by its sidecar by name (LostEvent): not gaps.
	ReportedLost    int64 `json:"reportedLost,omitempty"`
	OrderViolations int64 `json:"orderViolations"`
	Mismatches      int64 `json:"mismatches"`
	Corrupt         int64 `json:"corrupt"`
	Unknown         int64 `json:"unknownEvents"`
	// Unflagged counts redeliveries the sidecar did not mark redelivered.
	Unflagged int64 `json:"unflaggedRedeliveries"`
}

func newAuditor(queue int, consumer string, total int64, partitions int, vl *violationLog) *auditor {
	a := &auditor{queue: queue, consumer: consumer, total: total, partitions: partitions, violations: vl,
		parts: make([]partitionAudit, partitions)}
	for p := range a.parts {
		n := expectedEvents(total, partitions, p)
		a.parts[p] = partitionAudit{offsetOf: filled(int(n), notDelivered), maxSeq: -1}
	}
	a.stats.Events = total
	return a
}

func filled(n int, v int32) []int32 {
	s := make([]int32, n)
	for i := range s {
		s[i] = v
	}
	return s
}

func (a *auditor) violation(kind string, partition int, seqs, offsets []int64, format string, args ...any) {
	v := Violation{Kind: kind, Queue: a.queue, Consumer: a.consumer, Seqs: seqs, Offsets: offsets, Detail: fmt.Sprintf(format, args...)}
	if partition >= 0 {
		v.Partition = partitionName(partition)
	}
	a.violations.add(v)
}

// deliver records one delivered message and reports whether it is the
// first delivery of its sequence number in this queue.
func (a *auditor) deliver(m queenside.Message) (event, bool) {
	e, err := decodeMessage(m, a.queue, a.partitions)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stats.Deliveries++
	if m.Redelivered {
		a.stats.FlaggedRedelivered++
	}
	if err != nil {
		a.stats.Corrupt++
		a.violation(ViolationCorrupt, -1, nil, []int64{m.Offset}, "partition %q: %v", m.Partition, err)
		return e, false
	}
	pa := &a.parts[e.partition]
	known := a.known(pa, e)
	seq := int32(unknownSeq)
	if known {
		seq = int32(e.seq)
	}
	off := m.Offset
	if off < 0 || off > 1<<31-1 {
		a.stats.Corrupt++
		a.violation(ViolationCorrupt, e.partition, []int64{e.seq}, []int64{off}, "offset out of range")
		return e, false
	}
	pa.grow(off)

	if prev := pa.seqAt[off]; prev != notDelivered {
		// The same offset again: a redelivery, and it must be the same event.
		if pa.delivered[off] < ^uint16(0) {
			pa.delivered[off]++
		}
		a.stats.Redeliveries++
		if !m.Redelivered {
			a.stats.Unflagged++
			a.violation(ViolationUnflagged, e.partition, []int64{e.seq}, []int64{off},
				"delivered again without redelivered: true")
		}
		if prev != seq {
			a.stats.Mismatches++
			a.violation(ViolationMismatch, e.partition, []int64{int64(prev), e.seq}, []int64{off},
				"delivered first with sequence number %d, then with %d", prev, e.seq)
		}
		return e, false
	}

	// A new offset: a stored message seen for the first time.
	a.stats.StoredOffsets++
	if m.Redelivered {
		a.stats.FirstSeenFlagged++
	}
	if off != pa.next {
		a.stats.OrderViolations++
		a.violation(ViolationDeliveryOrder, e.partition, []int64{e.seq}, []int64{pa.next, off},
			"offset %d delivered before offset %d ever was", off, pa.next)
	}
	pa.seqAt[off], pa.delivered[off] = seq, 1
	for pa.next < int64(len(pa.seqAt)) && pa.seqAt[pa.next] != notDelivered {
		pa.next++
	}
	if !known {
		a.stats.Unknown++
		a.violation(ViolationUnknown, e.partition, []int64{e.seq}, []int64{off},
			"the loader pushed sequence numbers 0..%d to this partition", len(pa.offsetOf)-1)
		return e, false
	}
	if first := pa.offsetOf[seq]; first != notDelivered {
		a.stats.Duplicates++
		a.violation(ViolationDuplicate, e.partition, []int64{e.seq}, []int64{int64(first), off},
			"stored twice, at offsets %d and %d", first, off)
		return e, false
	}
	pa.offsetOf[seq] = int32(off)
	a.stats.Verified++
	if e.seq < pa.maxSeq {
		a.stats.OrderViolations++
		a.violation(ViolationOrder, e.partition, []int64{pa.maxSeq, e.seq}, []int64{int64(pa.offsetOf[pa.maxSeq]), off},
			"sequence number %d at offset %d comes after %d at a lower offset", e.seq, off, pa.maxSeq)
	} else {
		pa.maxSeq = e.seq
	}
	return e, true
}

// known tells whether the loader pushed e; one it pushed past --duration
// gets its place in the partition's table.
func (a *auditor) known(pa *partitionAudit, e event) bool {
	if e.seq < 0 {
		return false
	}
	if e.seq < int64(len(pa.offsetOf)) {
		return true
	}
	if a.pushed == nil {
		return false
	}
	n := a.pushed()
	if e.seq > n/int64(a.partitions) || e.seq*int64(a.partitions)+int64(e.partition) >= n {
		return false
	}
	pa.expect(e.seq + 1)
	return true
}

// expect makes room for sequence numbers 0..n-1 in offsetOf.
func (pa *partitionAudit) expect(n int64) {
	for int64(len(pa.offsetOf)) < n {
		pa.offsetOf = append(pa.offsetOf, notDelivered)
	}
}

func (pa *partitionAudit) grow(off int64) {
	for int64(len(pa.seqAt)) <= off {
		pa.seqAt = append(pa.seqAt, notDelivered)
		pa.delivered = append(pa.delivered, 0)
	}
}

// verified is the number of distinct sequence numbers delivered so far.
func (a *auditor) verified() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stats.Verified
}

// missedRedelivery returns, of the given offsets of partition p (messages a
// consumer abandoned), those that were never delivered again.
func (a *auditor) missedRedelivery(p int, offsets []int64) []int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	pa := &a.parts[p]
	var missed []int64
	for _, off := range offsets {
		if off >= int64(len(pa.delivered)) || pa.delivered[off] < 2 {
			missed = append(missed, off)
		}
	}
	return missed
}

// finish counts the gaps, once the run has drained, against the total of
// events the loader pushed, and, given the queue's head offsets (nil when
// unknown), the stored messages never delivered. An event a sidecar
// reported lost in this queue or an earlier one (the stages carry an
// event's sequence number and partition from queue to queue) is counted
// as reported, not as a gap.
func (a *auditor) finish(heads map[string]int64, total int64, lost []LostEvent) AuditStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stats.Events = max(total, a.total)
	for p := range a.parts {
		pa := &a.parts[p]
		pa.expect(expectedEvents(a.stats.Events, a.partitions, p))
		var missing []int64
		for seq, off := range pa.offsetOf {
			if off == notDelivered {
				if reportedLost(lost, a.queue, partitionName(p), int64(seq)) {
					a.stats.ReportedLost++
					continue
				}
				missing = append(missing, int64(seq))
			}
		}
		if len(missing) > 0 {
			a.stats.Gaps += int64(len(missing))
			a.violation(ViolationGap, p, missing, nil, "%d of %d sequence numbers never arrived", len(missing), len(pa.offsetOf))
		}
		if heads == nil {
			continue
		}
		if head := heads[partitionName(p)]; head > pa.next {
			var offs []int64
			for off := pa.next; off < head; off++ {
				if off >= int64(len(pa.seqAt)) || pa.seqAt[off] == notDelivered {
					offs = append(offs, off)
				}
			}
			a.violation(ViolationUndelivered, p, nil, offs, "the partition holds %d messages; these were never delivered to %s", head, a.consumer)
		}
	}
	return a.stats
}

func (a *auditor) snapshot() AuditStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stats
}

func reportedLost(lost []LostEvent, queue int, partition string, seq int64) bool {
	for _, e := range lost {
		if e.Queue <= queue && e.Partition == partition && e.Seq == seq {
			return true
		}
	}
	return false
}
