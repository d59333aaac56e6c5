package verify

import (
	"fmt"
	"maps"
	"slices"
)

// finalChecks run once the pipeline has drained (or the drain gave up):
// the gaps and undelivered messages of every queue, what became of the
// messages the consumer faults abandoned, and what is left in the spools.
func (r *run) finalChecks(s pipelineState, drained bool) []AuditStats {
	lost := r.inj.reportedLost()
	stats := make([]AuditStats, len(r.groups))
	for i, g := range r.groups {
		stats[i] = g.audit.finish(s.heads[i], r.loader.events(), lost)
	}
	for _, f := range r.inj.snapshot() {
		r.checkOrder(f)
	}
	if s.spooled > 0 {
		r.vl.add(Violation{Kind: ViolationSpoolLeft, Detail: fmt.Sprintf("%d records still in the spools at the end", s.spooled)})
	}
	if !drained {
		r.vl.add(Violation{Kind: ViolationNotDrained, Detail: fmt.Sprintf("after %v: %s", r.cfg.DrainTimeout, s)})
	}
	return stats
}

// checkOrder checks a consumer fault's messages: a commit after the leases
// expired is a violation, and messages that were abandoned (or refused)
// must have been delivered again to the same group.
func (r *run) checkOrder(f *FaultRecord) {
	o := f.order
	if o == nil || f.Error != "" {
		return
	}
	select {
	case <-o.done:
	default:
		f.Outcome = "not carried out before the run ended"
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	f.Outcome = o.outcome
	g := r.groups[o.queue-1]
	if o.accepted {
		for _, p := range sortedPartitions(o.abandoned) {
			r.vl.add(Violation{Kind: ViolationExpiredLease, Queue: o.queue, Consumer: g.label, Partition: partitionName(p),
				Offsets: o.abandoned[p], Detail: "committed after every lease of the pop had expired"})
		}
		return
	}
	if o.outcome == "interrupted" {
		return
	}
	redelivered := 0
	for _, p := range sortedPartitions(o.abandoned) {
		missed := g.audit.missedRedelivery(p, o.abandoned[p])
		redelivered += len(o.abandoned[p]) - len(missed)
		if len(missed) > 0 {
			r.vl.add(Violation{Kind: ViolationNotRedelivered, Queue: o.queue, Consumer: g.label, Partition: partitionName(p),
				Offsets: missed, Detail: fmt.Sprintf("abandoned by %s (%s) and never delivered again", o.victim, f.Kind)})
		}
	}
	f.Outcome += fmt.Sprintf("; %d of %d messages delivered again", redelivered, o.messages)
}

func sortedPartitions(m map[int][]int64) []int { return slices.Sorted(maps.Keys(m)) }
