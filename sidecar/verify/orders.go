package verify

import (
	"sync"

	queenside "github.com/queenside/queenside/clients/go"
)

// order is a consumer fault handed by the injector to whichever consumer
// of a group pops messages next: die holding them (FaultConsumerKill), or
// hold them past their leases and only then commit (FaultLeaseExpiry).
type order struct {
	kind  FaultKind
	taken chan struct{} // closed by the consumer that takes it
	done  chan struct{} // closed once it has been carried out

	mu sync.Mutex
	// What the consumer did; read after taken (victim, messages) or done.
	victim    string
	queue     int
	messages  int
	leases    int
	abandoned map[int][]int64 // partition -> offsets that must be delivered again
	outcome   string
	accepted  bool // the commit after expiry succeeded: a violation
}

func newOrder(kind FaultKind) *order {
	return &order{kind: kind, taken: make(chan struct{}), done: make(chan struct{})}
}

// take records the messages of the pop the order is carried out on.
func (o *order) take(victim string, queue int, res queenside.PopResult, partitions int) {
	o.mu.Lock()
	o.victim, o.queue, o.messages, o.leases = victim, queue, len(res.Messages), len(res.Leases)
	o.abandoned = map[int][]int64{}
	for _, m := range res.Messages {
		if p, ok := parsePartition(m.Partition, partitions); ok {
			o.abandoned[p] = append(o.abandoned[p], m.Offset)
		}
	}
	o.mu.Unlock()
	close(o.taken)
}

func (o *order) finish(outcome string, accepted bool) {
	o.mu.Lock()
	o.outcome, o.accepted = outcome, accepted
	o.mu.Unlock()
	close(o.done)
}
