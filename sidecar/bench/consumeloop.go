package bench

import (
	"context"
	"sync"
	"time"

	queenside "github.com/queenside/queenside/clients/go"
)

// The consume and ackasync scenarios measure what an application sees: the
// Go client's Consume loop draining the backlog (the same one popack and
// autoack drain, in a group of their own), one loop per connection, with a
// handler that does nothing but count. consume waits for each batch's ack
// before popping again; ackasync sets ConsumeOptions.AckAsync, so acks go
// in the background while the next pop is in flight. Run one and then the
// other (or each in its own invocation) to compare them.

// consumeLoopWait is the long-poll wait of the loops. They stop once the
// backlog is consumed, so it only matters if messages went missing.
const consumeLoopWait = 1000

func (b *bench) scenarioConsume(ctx context.Context) Result {
	return b.consumeLoopScenario(ctx, ScenarioConsume, false)
}

func (b *bench) scenarioAckAsync(ctx context.Context) Result {
	return b.consumeLoopScenario(ctx, ScenarioAckAsync, true)
}

func (b *bench) consumeLoopScenario(ctx context.Context, name string, async bool) Result {
	r := Result{Name: name}
	bl, ok := b.backlogFor(ctx, &r)
	if !ok {
		return r
	}
	conns, done, err := dial(ctx, b.socket, b.cfg.Connections)
	if err != nil {
		r.setupFailed(err)
		return r
	}
	defer done()

	g := &group{name: name, target: bl.messages}
	g.progress.Store(time.Now().UnixNano())
	// The loops stop when the group has consumed the backlog, or when
	// nothing came for StallTimeout (then the scenario fails).
	loopCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-loopCtx.Done():
				return
			case <-t.C:
				if time.Since(time.Unix(0, g.progress.Load())) > b.cfg.StallTimeout {
					g.stalled.Store(true)
					stop()
					return
				}
			}
		}
	}()

	m := b.probe.start()
	ts := tallies(len(conns))
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() { b.consumeLoop(loopCtx, stop, c, ts[i], g, bl.queue, async) })
	}
	wg.Wait() // Consume returns only once its acks were answered
	m.stop(&r)
	t := newTally().merge(ts...)
	if g.stalled.Load() {
		t.failf("group %s stalled: nothing delivered for %v, %d of %d messages consumed",
			g.name, b.cfg.StallTimeout, g.consumed.Load(), g.target)
	}
	// Consume reports no ack item refused without AckAsync: what the
	// group has left after the loops ended checks both modes alike.
	if lag, err := groupLag(ctx, conns[0], bl.queue, g.name); err != nil {
		t.failf("stats: %v", err)
	} else if lag != 0 {
		t.failf("group %s has %d messages left after consuming the backlog", g.name, lag)
	}
	r.absorb(t, "batch")
	return r
}

// consumeLoop runs one Consume until the group's target is reached. It
// records each batch's cycle (from its first message to the next batch's
// first message: pop, handling and, without AckAsync, the ack) as a
// "batch" request, since Consume's own requests cannot be timed from here.
func (b *bench) consumeLoop(ctx context.Context, stop context.CancelFunc, c *queenside.Client, t *tally, g *group, queue string, async bool) {
	var (
		lastLease  string
		batchStart time.Time
		mu         sync.Mutex // t is also written by OnAckError, from another goroutine
	)
	_, err := c.Consume(ctx, queue, func(_ context.Context, msg queenside.Message) error {
		mu.Lock()
		defer mu.Unlock()
		now := time.Now()
		if msg.LeaseID != lastLease {
			if !batchStart.IsZero() {
				t.took("batch", batchStart)
			}
			lastLease, batchStart = msg.LeaseID, now
		}
		t.delivered([]queenside.Message{msg}, now)
		g.progress.Store(now.UnixNano())
		if g.consumed.Add(1) >= g.target {
			stop()
		}
		return nil
	}, queenside.ConsumeOptions{
		Group: g.name, Batch: b.cfg.PopBatch, Partitions: b.cfg.PopPartitions, WaitMs: consumeLoopWait,
		AckAsync: async,
		// The bench's own Ctrl-C handling ends the run and prints it.
		IgnoreSignals: true,
		OnAckError: func(err error) {
			mu.Lock()
			t.failf("ack: %v", err)
			mu.Unlock()
		},
	})
	if err != nil {
		mu.Lock()
		t.failf("consume: %v", err)
		mu.Unlock()
	}
	if !batchStart.IsZero() {
		t.took("batch", batchStart)
	}
}

// groupLag sums a group's lag over the partitions of queue.
func groupLag(ctx context.Context, c *queenside.Client, queue, group string) (int64, error) {
	st, err := c.Stats(ctx, queue)
	if err != nil {
		return 0, err
	}
	var lag int64
	for _, p := range st.Partitions {
		for _, g := range p.Groups {
			if g.Group == group {
				lag += g.Lag
			}
		}
	}
	return lag, nil
}
