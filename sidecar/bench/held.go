package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	queenside "github.com/queenside/queenside/clients/go"
)

// The held scenario asks whether what a pop costs PostgreSQL stays flat
// over a large backlog when some partitions' heads stay behind. It pushes
// cfg.HeldMessages over cfg.HeldPartitions (not measured), then drains the
// backlog twice, each time in a group of its own and with lease+ack pops
// as popack does:
//
//   - free: every partition can be handed out;
//   - held: a holder first leases the head message of cfg.HeldBack
//     partitions for longer than the run and never acks it, so those
//     partitions keep messages no pop may take (the head a long lease keeps
//     behind; to a pop, a delayed or retried head is the same: a partition
//     with messages it cannot hand out). The drain takes everything else.
//
// Each drain reports PostgreSQL's CPU a message over the whole drain and
// over its first and last tenth: a cost that grew with the run, or with
// the held partitions, shows as a last tenth above the first, or as held
// above free.

// heldLease outlives any drain: the held heads stay held for the run.
const heldLease = 3600

// heldSampleEvery is how often a drain reads its progress and
// PostgreSQL's CPU.
const heldSampleEvery = 200 * time.Millisecond

// HeldReport is what the held scenario measured.
type HeldReport struct {
	Partitions int       `json:"partitions"`
	HeldBack   int       `json:"heldBack"`
	Free       HeldDrain `json:"free"`
	Held       HeldDrain `json:"held"`
}

// HeldDrain is one drain: the messages its group consumed and
// PostgreSQL's CPU per message, in microseconds, over the drain and its
// first and last tenth (by messages consumed). Zero when PostgreSQL's CPU
// could not be read.
type HeldDrain struct {
	Messages         int64   `json:"messages"`
	Seconds          float64 `json:"seconds"`
	PostgresMicros   float64 `json:"postgresMicrosPerMessage"`
	FirstTenthMicros float64 `json:"firstTenthMicrosPerMessage"`
	LastTenthMicros  float64 `json:"lastTenthMicrosPerMessage"`
}

func (b *bench) scenarioHeld(ctx context.Context) Result {
	r := Result{Name: ScenarioHeld}
	bl, err := b.prepareBacklog(ctx, ScenarioHeld, int64(b.cfg.HeldMessages), b.cfg.HeldPartitions)
	if err != nil {
		r.setupFailed(err)
		return r
	}
	r.inherit("preparation push", bl.prep)
	conns, done, err := dial(ctx, b.socket, b.cfg.Connections)
	if err != nil {
		r.setupFailed(err)
		return r
	}
	defer done()

	rep := HeldReport{Partitions: b.cfg.HeldPartitions, HeldBack: b.cfg.HeldBack}
	m := b.probe.start()
	var freeT, heldT *tally
	rep.Free, freeT = b.drainSampled(ctx, conns, bl.queue, "held-free", bl.messages)
	held, err := holdHeads(ctx, conns[0], bl.queue, "held-held", b.cfg.HeldBack)
	if err != nil {
		r.setupFailed(err)
		return r
	}
	rep.Held, heldT = b.drainSampled(ctx, conns, bl.queue, "held-held", bl.messages-held)
	m.stop(&r)
	r.absorb(newTally().merge(freeT, heldT), "pop", "ack")
	r.Held = &rep
	b.printHeld(rep)
	return r
}

// holdHeads leases the head message of the first n partitions in group
// and never acks it; it returns how many messages those partitions hold,
// which the group's drain cannot take.
func holdHeads(ctx context.Context, c *queenside.Client, queue, group string, n int) (int64, error) {
	names := make(map[string]bool, n)
	for i := range n {
		name := "p" + strconv.Itoa(i)
		res, err := c.Pop(ctx, queenside.PopArgs{Queue: queue, Group: group, Partition: name, Batch: 1,
			LeaseSeconds: heldLease})
		if err != nil {
			return 0, fmt.Errorf("hold the head of %s: %w", name, err)
		}
		if len(res.Messages) != 1 {
			return 0, fmt.Errorf("hold the head of %s: %d messages delivered, want 1", name, len(res.Messages))
		}
		names[name] = true
	}
	st, err := c.Stats(ctx, queue)
	if err != nil {
		return 0, fmt.Errorf("stats: %w", err)
	}
	var held int64
	for _, p := range st.Partitions {
		if names[p.Partition] {
			held += p.Messages
		}
	}
	return held, nil
}

// drainSampled drains target messages in a new group with cfg.Inflight
// lease+ack workers on each connection, reading its progress and
// PostgreSQL's CPU every heldSampleEvery.
func (b *bench) drainSampled(ctx context.Context, conns []*queenside.Client, queue, name string, target int64) (HeldDrain, *tally) {
	g := &group{name: name, target: target}
	g.progress.Store(time.Now().UnixNano())
	type point struct {
		consumed int64
		postgres *int64
	}
	var points []point
	stop := make(chan struct{})
	var wg sync.WaitGroup
	start := time.Now()
	wg.Go(func() {
		tick := time.NewTicker(heldSampleEvery)
		defer tick.Stop()
		for {
			points = append(points, point{g.consumed.Load(), b.probe.sample().postgres})
			select {
			case <-stop:
				points = append(points, point{g.consumed.Load(), b.probe.sample().postgres})
				return
			case <-tick.C:
			}
		}
	})
	t := workers(conns, b.cfg.Inflight, func(_ int, c *queenside.Client, t *tally) {
		args := queenside.PopArgs{Queue: queue, Group: name, Batch: b.cfg.PopBatch, Partitions: b.cfg.PopPartitions}
		b.drainWorker(ctx, c, t, g, args)
	})
	close(stop)
	wg.Wait()

	d := HeldDrain{Messages: g.consumed.Load(), Seconds: time.Since(start).Seconds()}
	// micros is PostgreSQL's CPU a message between the first point at or
	// past consumed from and the first at or past to.
	micros := func(from, to int64) float64 {
		var a, z *point
		for i := range points {
			p := &points[i]
			if a == nil && p.consumed >= from {
				a = p
			}
			if z == nil && p.consumed >= to {
				z = p
			}
		}
		if a == nil || z == nil || a.postgres == nil || z.postgres == nil || z.consumed <= a.consumed {
			return 0
		}
		return float64(*z.postgres-*a.postgres) / b.probe.hz * 1e6 / float64(z.consumed-a.consumed)
	}
	d.PostgresMicros = micros(0, d.Messages)
	d.FirstTenthMicros = micros(0, d.Messages/10)
	d.LastTenthMicros = micros(d.Messages-d.Messages/10, d.Messages)
	return d, t
}

func (b *bench) printHeld(rep HeldReport) {
	fmt.Fprintf(b.out, "  held: PostgreSQL CPU a message popped and acked, µs, over %d partitions\n", rep.Partitions)
	micros := func(v float64) string { // 0: not measured (CPU unknown, or a tenth shorter than a sample)
		if v == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f", v)
	}
	line := func(what string, d HeldDrain) {
		fmt.Fprintf(b.out, "    %-28s %9s messages in %5.1f s: %6s µs (first tenth %6s, last tenth %6s)\n",
			what, thousands(float64(d.Messages)), d.Seconds, micros(d.PostgresMicros), micros(d.FirstTenthMicros), micros(d.LastTenthMicros))
	}
	line("every partition free", rep.Free)
	line(fmt.Sprintf("%d heads held back", rep.HeldBack), rep.Held)
	if rep.Free.PostgresMicros > 0 {
		fmt.Fprintf(b.out, "    held / free: %.2f\n", rep.Held.PostgresMicros/rep.Free.PostgresMicros)
	}
}
