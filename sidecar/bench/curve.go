package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	queenside "github.com/queenside/queenside/clients/go"
)

// The curve: the live queue (mixed's producers and consumers at once) at a
// sweep of offered rates, each on a fresh queue whose partitions and group
// already exist. A broker spends its life at rates well below its ceiling,
// so what a message costs and how long it takes there matters as much as
// the ceiling itself.

// CurvePoint is the live queue at one offered rate.
type CurvePoint struct {
	OfferedPerSec int     `json:"offeredPerSec"`
	Seconds       float64 `json:"seconds"` // the producers' window
	Pushed        int64   `json:"pushed"`
	// Delivered counts deliveries inside the window; DeliveredPerSec is
	// that over Seconds.
	Delivered       int64   `json:"delivered"`
	DeliveredPerSec float64 `json:"deliveredPerSec"`
	// Left is what was pushed in the window and not delivered in it: about
	// the rate times the delivery time while consumers keep up, growing
	// with the window when they do not. DrainSeconds is how long the
	// consumers then took to deliver it (they get at most curveDrain).
	Left         int64           `json:"left"`
	DrainSeconds float64         `json:"drainSeconds"`
	Drained      bool            `json:"drained"`
	Delivery     *LatencySummary `json:"delivery"` // every message, those drained after the window too
	// AfterCommit is the part of Delivery after the push committed: from
	// the message's commit time to the end of the pop that returned it.
	AfterCommit *LatencySummary `json:"afterCommit"`
	Push        *LatencySummary `json:"push"`
	Pop         *LatencySummary `json:"pop"`
	Ack         *LatencySummary `json:"ack"`
	// CPU over the window, and per message delivered in it.
	PostgresCPUSeconds *float64 `json:"postgresCpuSeconds"`
	SidecarCPUSeconds  *float64 `json:"sidecarCpuSeconds"`
	PostgresMicrosPer  *float64 `json:"postgresMicrosPerMessage"`
	SidecarMicrosPer   *float64 `json:"sidecarMicrosPerMessage"`
	// Writes is what PostgreSQL wrote from the window's start until the
	// drain delivered everything, over every message delivered.
	Writes *Writes `json:"writes"`
	// Fairness: the partitions that were pushed to in the window, and how
	// many of them were delivered from (in the window or the drain).
	PartitionsPushed int   `json:"partitionsPushed"`
	PartitionsServed int   `json:"partitionsServed"`
	EmptyPops        int64 `json:"emptyPops"`
	Redelivered      int64 `json:"redelivered"`
	Errors           int64 `json:"errors"`

	benchCPUSeconds     *float64
	sidecarPeakRSSBytes *int64
}

// curveDrain bounds how long the consumers of a curve point get, after the
// producers stop, to deliver what is left.
const curveDrain = 10 * time.Second

// scenarioCurve runs every rate of cfg.CurveRates in turn. Its headline
// figures add the points up; the points are in r.Curve.
func (b *bench) scenarioCurve(ctx context.Context) Result {
	r := Result{Name: ScenarioCurve}
	fmt.Fprintf(b.out, "  consumers: %d, %s\n", b.cfg.MixedConsumers, b.cfg.consumerName())
	b.sweep(ctx, &r, b.curvePoint, curveLine)
	return r
}

// sweep measures point at every rate of cfg.CurveRates in turn, prints
// each as line says, and adds them up into r.
func (b *bench) sweep(ctx context.Context, r *Result, point func(context.Context, int) (CurvePoint, *tally), line func(CurvePoint) string) {
	var all *tally
	for _, rate := range b.cfg.CurveRates {
		if ctx.Err() != nil {
			break
		}
		p, t := point(ctx, rate)
		r.Curve = append(r.Curve, p)
		fmt.Fprintf(b.out, "  %s\n", line(p))
		if all == nil {
			all = t
		} else {
			all.merge(t)
		}
		r.Seconds += p.Seconds
		r.PostgresCPUSeconds = addOpt(r.PostgresCPUSeconds, p.PostgresCPUSeconds)
		r.SidecarCPUSeconds = addOpt(r.SidecarCPUSeconds, p.SidecarCPUSeconds)
		r.BenchCPUSeconds = addOpt(r.BenchCPUSeconds, p.benchCPUSeconds)
		if p.sidecarPeakRSSBytes != nil {
			r.SidecarPeakRSSBytes = p.sidecarPeakRSSBytes
		}
		r.Pushed += p.Pushed
	}
	if all != nil {
		pushed := r.Pushed
		r.absorb(all, "push")
		r.Pushed = pushed
	}
}

// curvePoint measures one offered rate on a queue of its own.
func (b *bench) curvePoint(ctx context.Context, rate int) (CurvePoint, *tally) {
	p := CurvePoint{OfferedPerSec: rate}
	name := fmt.Sprintf("%s-%d", ScenarioCurve, rate)
	queue := b.queue(name)
	fail := func(err error) (CurvePoint, *tally) {
		t := newTally()
		t.failf("%s: %v", name, err)
		p.Errors = t.errors
		return p, t
	}
	producers, doneP, err := dial(ctx, b.socket, b.cfg.MixedProducers)
	if err != nil {
		return fail(err)
	}
	defer doneP()
	consumers, doneC, err := dial(ctx, b.socket, b.cfg.MixedConsumers)
	if err != nil {
		return fail(err)
	}
	defer doneC()
	args := queenside.PopArgs{Queue: queue, Group: ScenarioCurve, Batch: b.cfg.PopBatch, Partitions: b.cfg.MixedPopPartitions}
	if err := b.warmQueue(ctx, producers, consumers[0], queue, b.cfg.MixedPartitions, args); err != nil {
		return fail(err)
	}

	var end, drainEnd time.Time // set once the consumers are ready, before they run
	var inWindow, drained atomic.Int64
	pushedTotal := atomic.Int64{}
	pushedTotal.Store(-1) // unknown until the producers are done
	run, err := b.startConsumers(ctx, consumers, liveConsumers{
		queue: queue, group: ScenarioCurve,
		done: func() bool {
			all := pushedTotal.Load()
			return !time.Now().Before(drainEnd) || all >= 0 && inWindow.Load()+drained.Load() >= all
		},
		waitMs: func() int {
			if left := time.Until(end); left > 0 {
				return min(b.cfg.MixedWaitMs, int(left/time.Millisecond)+1)
			}
			return 100 // draining: look again soon, and stop once all is in
		},
		count: func(n int, at time.Time) {
			if at.Before(end) {
				inWindow.Add(int64(n))
			} else {
				drained.Add(int64(n))
			}
		},
	})
	if err != nil {
		return fail(err)
	}

	bt := b.newBatcher(queue, name, b.cfg.MixedPartitions)
	writes := b.countWrites(ctx)
	m := b.probe.start()
	end = time.Now().Add(b.cfg.CurveDuration)
	drainEnd = end.Add(curveDrain)
	var pushed, consumed *tally
	var wg sync.WaitGroup
	wg.Go(func() { // the CPU of the window, and nothing after it
		time.Sleep(time.Until(end))
		var r Result
		m.stop(&r)
		p.PostgresCPUSeconds, p.SidecarCPUSeconds = r.PostgresCPUSeconds, r.SidecarCPUSeconds
		p.benchCPUSeconds, p.sidecarPeakRSSBytes = r.BenchCPUSeconds, r.SidecarPeakRSSBytes
	})
	wg.Go(func() {
		pushed = b.produce(ctx, producers, bt, rate, end)
		pushedTotal.Store(pushed.messages)
	})
	wg.Go(func() { consumed = run() })
	wg.Wait()
	p.Writes = writes(inWindow.Load() + drained.Load())
	return p, p.fill(b.cfg, end, pushed, consumed, inWindow.Load(), drained.Load())
}

// fill works out a point's figures once its window and drain are over:
// deliveries in the window and after it, the latencies, the CPU a message
// (the sidecar's when it was measured), and the partitions served (pgmq's
// groups). It returns the producers' and consumers' tallies merged, its
// pushed the producers' queued items and its messages the deliveries.
func (p *CurvePoint) fill(cfg Config, end time.Time, pushed, consumed *tally, inWindow, drained int64) *tally {
	p.Seconds = cfg.CurveDuration.Seconds()
	p.Pushed = pushed.messages
	p.Delivered = inWindow
	p.DeliveredPerSec = float64(p.Delivered) / p.Seconds
	p.Left = p.Pushed - p.Delivered
	p.Drained = p.Delivered+drained >= p.Pushed
	p.DrainSeconds = curveDrain.Seconds()
	if p.Drained {
		p.DrainSeconds = max(consumed.lastDelivery.Sub(end).Seconds(), 0)
	}
	p.PartitionsPushed = min(int(p.Pushed), cfg.MixedPartitions) // message k goes to partition k mod the count
	p.PartitionsServed = len(consumed.partitions)
	if p.Delivered > 0 {
		if v := p.PostgresCPUSeconds; v != nil {
			p.PostgresMicrosPer = ptr(*v / float64(p.Delivered) * 1e6)
		}
		if v := p.SidecarCPUSeconds; v != nil {
			p.SidecarMicrosPer = ptr(*v / float64(p.Delivered) * 1e6)
		}
	}
	consumedMessages := consumed.messages
	all := pushed.merge(consumed)
	p.Delivery = summarize(all.delivery)
	p.AfterCommit = summarize(all.afterCommit)
	p.Push = summarize(all.requests["push"])
	p.Pop = summarize(all.requests["pop"])
	p.Ack = summarize(all.requests["ack"])
	p.EmptyPops = all.emptyPops
	p.Redelivered = all.redelivered
	p.Errors = all.errors
	all.pushed, all.messages = all.messages-consumedMessages, consumedMessages
	return all
}

// warmQueue gives a fresh queue its partitions and the consumers' group,
// outside any measurement: one message to each partition, all consumed.
// The measured part then starts from the steady state of a live queue
// rather than from creating it.
func (b *bench) warmQueue(ctx context.Context, producers []*queenside.Client, consumer *queenside.Client,
	queue string, partitions int, args queenside.PopArgs) error {
	if err := configure(ctx, producers[0], queue); err != nil {
		return err
	}
	// The group first, so that it reads the warm-up messages from offset 0.
	a := args
	a.WaitMs = 0
	if _, err := consumer.Pop(ctx, a); err != nil {
		return fmt.Errorf("create the group: %w", err)
	}
	t := b.pushAll(ctx, producers, b.newBatcher(queue, "warm", partitions), int64(partitions))
	if t.errors > 0 {
		return fmt.Errorf("warm-up push: %s", t.samples[0])
	}
	a.Partitions, a.Batch = 100, 1000
	for consumed := 0; consumed < partitions; {
		n := popAndAck(ctx, consumer, t, a)
		if t.errors > 0 {
			return fmt.Errorf("warm-up consume: %s", t.samples[0])
		}
		if n == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
			a.WaitMs = 1000
		}
		consumed += n
	}
	return nil
}

func addOpt(sum, v *float64) *float64 {
	if v == nil {
		return sum
	}
	if sum == nil {
		return ptr(*v)
	}
	return ptr(*sum + *v)
}
