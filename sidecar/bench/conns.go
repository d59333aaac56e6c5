package bench

import (
	"context"
	"fmt"
	"sync"

	queenside "github.com/queenside/queenside/clients/go"
)

// dial opens n connections to the sidecar. Connecting happens before a
// scenario's meter starts, so it is not part of any figure.
func dial(ctx context.Context, socket string, n int) ([]*queenside.Client, func(), error) {
	conns := make([]*queenside.Client, 0, n)
	closeAll := func() {
		for _, c := range conns {
			c.Close()
		}
	}
	for range n {
		c, err := queenside.Dial(ctx, socket)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("connect to the sidecar: %w", err)
		}
		conns = append(conns, c)
	}
	return conns, closeAll, nil
}

// workers runs inflight workers on each connection and waits for them all.
// Each worker is one sequential stream of requests, so a connection has up
// to inflight requests outstanding. fn gets the worker's index among all
// workers and its tally.
func workers(conns []*queenside.Client, inflight int, fn func(w int, c *queenside.Client, t *tally)) *tally {
	ts := tallies(len(conns) * inflight)
	var wg sync.WaitGroup
	for w := range ts {
		wg.Go(func() { fn(w, conns[w%len(conns)], ts[w]) })
	}
	wg.Wait()
	return newTally().merge(ts...)
}
