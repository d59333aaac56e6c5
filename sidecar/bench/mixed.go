package bench

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	queenside "github.com/queenside/queenside/clients/go"
)

// scenarioMixed runs producers and consumers at once over many partitions
// for cfg.MixedDuration: the steady state of a live queue. Its rate is what
// the consumers received; push-to-delivery latency shows whether they keep
// up, since a growing backlog shows up in it directly.
func (b *bench) scenarioMixed(ctx context.Context) Result {
	r := Result{Name: ScenarioMixed}
	queue := b.queue(ScenarioMixed)
	producers, doneP, err := b.prepare(ctx, &r, queue, b.cfg.MixedProducers)
	if err != nil {
		return r
	}
	defer doneP()
	consumers, doneC, err := dial(ctx, b.socket, b.cfg.MixedConsumers)
	if err != nil {
		r.setupFailed(err)
		return r
	}
	defer doneC()

	var end time.Time // set once the consumers are ready, before they run
	run, err := b.startConsumers(ctx, consumers, liveConsumers{
		queue: queue, group: ScenarioMixed,
		done: func() bool { return !time.Now().Before(end) },
		waitMs: func() int {
			return max(min(b.cfg.MixedWaitMs, int(time.Until(end)/time.Millisecond)), 0)
		},
		count: func(int, time.Time) {},
	})
	if err != nil {
		r.setupFailed(err)
		return r
	}

	bt := b.newBatcher(queue, ScenarioMixed, b.cfg.MixedPartitions)
	writes := b.countWrites(ctx)
	m := b.probe.start()
	end = time.Now().Add(b.cfg.MixedDuration)
	var pushed, consumed *tally
	var wg sync.WaitGroup
	wg.Go(func() { pushed = b.produce(ctx, producers, bt, b.cfg.MixedRate, end) })
	wg.Go(func() { consumed = run() })
	wg.Wait()
	m.stop(&r)
	// The producers' queued items are "pushed"; messages are deliveries.
	pushed.pushed, pushed.messages = pushed.messages, 0
	r.absorb(pushed.merge(consumed), "push")
	// The consumers stopped with the producers: what they left undelivered
	// is written for but not counted; at a rate they keep up with, that is
	// a delivery time's worth of messages.
	r.Writes = writes(consumed.messages)
	return r
}

// produce pushes batches from every producer worker until end, at full
// speed (rate 0) or each worker at its share of rate messages/s. Messages
// are numbered across workers so partitions are used in turn.
func (b *bench) produce(ctx context.Context, conns []*queenside.Client, bt batcher, rate int, end time.Time) *tally {
	var next atomic.Int64
	batch := int64(b.cfg.Batch)
	var interval time.Duration // between one worker's batches; 0 is full speed
	if rate > 0 {
		perWorker := float64(rate) / float64(len(conns)*b.cfg.Inflight)
		interval = time.Duration(float64(batch) / perWorker * float64(time.Second))
	}
	workerCount := len(conns) * b.cfg.Inflight
	begin := time.Now()
	return workers(conns, b.cfg.Inflight, func(w int, c *queenside.Client, t *tally) {
		// Each worker's schedule is offset by its share of the interval, so
		// that together they offer the rate evenly rather than all at the
		// same instants, in bursts of one batch a worker.
		start := begin.Add(interval * time.Duration(w) / time.Duration(workerCount))
		for i := 0; ctx.Err() == nil; i++ {
			if interval > 0 {
				// Paced against the start, not the last push, so a slow
				// push is caught up rather than lowering the rate.
				if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
					time.Sleep(min(wait, time.Until(end)))
				}
			}
			if !time.Now().Before(end) {
				return
			}
			from := next.Add(batch) - batch
			t.messages += pushOnce(ctx, c, t, bt.items(w, from, batch))
		}
	})
}

// consumeUntil long-polls and acks until end, each ack carried by the
// next pop. The last wait is cut to what is left, so the consumers stop
// with the producers.
func consumeUntil(ctx context.Context, c *queenside.Client, t *tally, args queenside.PopArgs, waitMs int, end time.Time) {
	y := &cycler{c: c, t: t}
	defer y.flush(ctx)
	for ctx.Err() == nil {
		left := time.Until(end)
		if left < time.Millisecond {
			return
		}
		args.WaitMs = min(waitMs, int(left/time.Millisecond))
		if y.next(ctx, args) == 0 {
			t.emptyPops++
			if args.WaitMs == 0 {
				time.Sleep(time.Millisecond) // no long-poll asked for: do not spin
			}
		}
	}
}
