package verify

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
)

// group is the consumer group reading one queue: a stage, which pushes
// what it consumes on to the next queue, or the checker, which only acks.
type group struct {
	queue     int    // 1-based index of the queue consumed
	label     string // "stage 2", or "checker"
	queueName string
	groupName string
	nextQueue string // the queue a stage pushes to; "" for the checker
	cfg       Config
	sidecars  []*sidecar
	audit     *auditor
	tl        *timeline
	lat       *latencies // the checker's end-to-end latencies; nil for stages
	stats     *counters
	vl        *violationLog
	orders    chan *order

	replacements atomic.Int64 // consumers started to replace a killed one
}

func (g *group) isChecker() bool { return g.nextQueue == "" }

// run keeps cfg.Consumers consumers going until ctx ends; a consumer killed
// by a fault is replaced by a new one, with a new connection.
func (g *group) run(ctx context.Context, seed uint64) {
	var wg sync.WaitGroup
	for i := range g.cfg.Consumers {
		wg.Go(func() {
			for n := 0; ctx.Err() == nil; n++ {
				c := &consumer{g: g, name: g.label + " consumer " + strconv.Itoa(i) + "." + strconv.Itoa(n),
					rng: rand.New(rand.NewPCG(seed, uint64(g.queue)<<32|uint64(i)<<16|uint64(n)))}
				if !c.run(ctx) {
					return
				}
				g.replacements.Add(1)
			}
		})
	}
	wg.Wait()
}
