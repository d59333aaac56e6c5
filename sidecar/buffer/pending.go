package buffer

import (
	"sync"
	"sync/atomic"
)

// pending counts the spooled records not yet in PostgreSQL, per partition.
// A partition with any is held: its new pushes are spooled behind them, so
// that replay keeps each partition in the order its items were received.
type pending struct {
	mu     sync.Mutex
	counts map[partitionKey]int
	// total is the sum of counts, read without the lock: with nothing
	// spooled (the usual case) a push asks no lock at all.
	total atomic.Int64
}

type partitionKey struct{ queue, partition string }

func newPending() *pending { return &pending{counts: make(map[partitionKey]int)} }

func (p *pending) holds(queue, partition string) bool {
	if p.total.Load() == 0 {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts[partitionKey{queue, partition}] > 0
}

func (p *pending) add(keys []partitionKey, delta int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, k := range keys {
		old := p.counts[k]
		n := max(old+delta, 0)
		if n > 0 {
			p.counts[k] = n
		} else {
			delete(p.counts, k)
		}
		p.total.Add(int64(n - old))
	}
}

// queues returns the queues with held partitions.
func (p *pending) queues() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	seen := make(map[string]bool)
	var out []string
	for k := range p.counts {
		if !seen[k.queue] {
			seen[k.queue] = true
			out = append(out, k.queue)
		}
	}
	return out
}
