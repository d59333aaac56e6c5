package buffer

import "sync"

// pending counts the spooled records not yet in PostgreSQL, per partition.
// A partition with any is held: its new pushes are spooled behind them, so
// that replay keeps each partition in the order its items were received.
type pending struct {
	mu     sync.Mutex
	counts map[partitionKey]int
}

type partitionKey struct{ queue, partition string }

func newPending() *pending { return &pending{counts: make(map[partitionKey]int)} }

func (p *pending) holds(queue, partition string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts[partitionKey{queue, partition}] > 0
}

func (p *pending) add(keys []partitionKey, delta int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, k := range keys {
		if n := p.counts[k] + delta; n > 0 {
			p.counts[k] = n
		} else {
			delete(p.counts, k)
		}
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
