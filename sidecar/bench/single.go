package bench

import "context"

// scenarioLatency measures what one message costs when nothing can be
// batched: one connection, one item per push, each sent once the previous
// one is answered.
func (b *bench) scenarioLatency(ctx context.Context) Result {
	r := Result{Name: ScenarioLatency}
	queue := b.queue(ScenarioLatency)
	conns, done, err := b.prepare(ctx, &r, queue, 1)
	if err != nil {
		return r
	}
	defer done()
	bt := b.newBatcher(queue, ScenarioLatency, 1)
	t := newTally()
	m := b.probe.start()
	for k := int64(0); k < int64(b.cfg.LatencyRequests) && ctx.Err() == nil; k++ {
		t.messages += pushOnce(ctx, conns[0], t, bt.items(0, k, 1))
	}
	m.stop(&r)
	r.absorb(t, "push")
	return r
}
