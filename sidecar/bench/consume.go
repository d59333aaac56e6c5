package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	queenside "github.com/queenside/queenside/clients/go"
)

// backlog is a queue holding messages for the consuming scenarios.
type backlog struct {
	queue    string
	messages int64  // queued, and so to be consumed by each group
	prep     *tally // the unmeasured push that made it; nil when push made it
}

// group is one consumer group draining a backlog, shared by its workers.
type group struct {
	name     string
	target   int64
	consumed atomic.Int64
	progress atomic.Int64 // UnixNano of the last delivery, for the stall guard
	stalled  atomic.Bool
}

// scenarioPopAck drains the backlog with leased pops, acking every message
// completed in one ack call per pop.
func (b *bench) scenarioPopAck(ctx context.Context) Result {
	return b.consumeScenario(ctx, ScenarioPopAck, false)
}

// scenarioAutoAck drains the same backlog, in another group, with autoAck.
func (b *bench) scenarioAutoAck(ctx context.Context) Result {
	return b.consumeScenario(ctx, ScenarioAutoAck, true)
}

func (b *bench) consumeScenario(ctx context.Context, name string, autoAck bool) Result {
	r := Result{Name: name}
	bl, ok := b.backlogFor(ctx, &r)
	if !ok {
		return r
	}
	b.drain(ctx, &r, bl, []string{name}, autoAck)
	return r
}

// scenarioFanout pushes a fresh backlog (unmeasured) and lets several
// groups drain it at once, each group with its own workers on the shared
// connections; its rate counts deliveries over all groups.
func (b *bench) scenarioFanout(ctx context.Context) Result {
	r := Result{Name: ScenarioFanout}
	bl, err := b.prepareBacklog(ctx, ScenarioFanout, int64(b.cfg.FanoutMessages), b.cfg.Partitions)
	if err != nil {
		r.setupFailed(err)
		return r
	}
	r.inherit("preparation push", bl.prep)
	names := make([]string, b.cfg.FanoutGroups)
	for i := range names {
		names[i] = "fanout-" + strconv.Itoa(i)
	}
	b.drain(ctx, &r, bl, names, false)
	return r
}

// ensureBacklog returns what push left, or makes an equal backlog when
// push did not run in this invocation.
func (b *bench) ensureBacklog(ctx context.Context) (*backlog, error) {
	if b.backlog == nil {
		bl, err := b.prepareBacklog(ctx, "backlog", int64(b.cfg.Messages), b.cfg.Partitions)
		if err != nil {
			return nil, err
		}
		b.backlog = bl
	}
	return b.backlog, nil
}

// prepareBacklog pushes n messages over the given number of partitions
// into a fresh queue, outside any measurement.
func (b *bench) prepareBacklog(ctx context.Context, name string, n int64, partitions int) (*backlog, error) {
	queue := b.queue(name)
	conns, done, err := dial(ctx, b.socket, b.cfg.Connections)
	if err != nil {
		return nil, err
	}
	defer done()
	if err := configure(ctx, conns[0], queue); err != nil {
		return nil, err
	}
	fmt.Fprintf(b.out, "  (preparing: pushing %d messages to %s, not measured)\n", n, queue)
	t := b.pushAll(ctx, conns, b.newBatcher(queue, name, partitions), n)
	return &backlog{queue: queue, messages: t.messages, prep: t}, nil
}

// drain measures groups consuming the whole of bl at once: every group has
// cfg.Inflight workers on each of cfg.Connections connections.
func (b *bench) drain(ctx context.Context, r *Result, bl *backlog, names []string, autoAck bool) {
	conns, done, err := dial(ctx, b.socket, b.cfg.Connections)
	if err != nil {
		r.setupFailed(err)
		return
	}
	defer done()
	groups := make([]*group, len(names))
	now := time.Now().UnixNano()
	for i, n := range names {
		groups[i] = &group{name: n, target: bl.messages}
		groups[i].progress.Store(now)
	}
	m := b.probe.start()
	// Workers are laid out group by group, so each group has its workers
	// spread over every connection.
	all := make([]*queenside.Client, 0, len(conns)*len(groups))
	for range groups {
		all = append(all, conns...)
	}
	t := workers(all, b.cfg.Inflight, func(w int, c *queenside.Client, t *tally) {
		g := groups[(w%len(all))/len(conns)]
		args := queenside.PopArgs{Queue: bl.queue, Group: g.name, Batch: b.cfg.PopBatch,
			Partitions: b.cfg.PopPartitions, AutoAck: autoAck}
		b.drainWorker(ctx, c, t, g, args)
	})
	m.stop(r)
	if autoAck {
		r.absorb(t, "pop")
	} else {
		r.absorb(t, "pop", "ack")
	}
}

// drainWorker pops without waiting until its group has consumed the whole
// backlog. An empty pop (every partition with messages left is leased by
// another worker) yields for a millisecond rather than spinning.
func (b *bench) drainWorker(ctx context.Context, c *queenside.Client, t *tally, g *group, args queenside.PopArgs) {
	for g.consumed.Load() < g.target && ctx.Err() == nil && !g.stalled.Load() {
		if idle := time.Since(time.Unix(0, g.progress.Load())); idle > b.cfg.StallTimeout {
			if g.stalled.CompareAndSwap(false, true) {
				t.failf("group %s stalled: nothing delivered for %v, %d of %d messages consumed",
					g.name, idle.Round(time.Second), g.consumed.Load(), g.target)
			}
			return
		}
		n := popAndAck(ctx, c, t, args)
		if n == 0 {
			t.emptyPops++
			time.Sleep(time.Millisecond)
			continue
		}
		g.consumed.Add(int64(n))
		g.progress.Store(time.Now().UnixNano())
	}
}

// popAndAck pops once and, unless args.AutoAck, acks every message
// completed in a single call. It returns how many messages were delivered.
func popAndAck(ctx context.Context, c *queenside.Client, t *tally, args queenside.PopArgs) int {
	start := time.Now()
	res, err := c.Pop(ctx, args)
	if err != nil {
		if ctx.Err() == nil {
			t.took("pop", start)
			t.failf("pop: %v", err)
			time.Sleep(10 * time.Millisecond) // do not spin on a failing sidecar
		}
		return 0
	}
	t.took("pop", start)
	t.delivered(res.Messages, time.Now())
	if args.AutoAck || len(res.Messages) == 0 {
		return len(res.Messages)
	}
	items := make([]queenside.AckItem, len(res.Messages))
	for i, msg := range res.Messages {
		items[i] = queenside.Completed(msg)
	}
	start = time.Now()
	ack, err := c.Ack(ctx, items...)
	if err != nil {
		if ctx.Err() == nil {
			t.took("ack", start)
			t.failf("ack: %v", err)
		}
		return len(res.Messages)
	}
	t.took("ack", start)
	if len(ack.Results) != len(items) {
		t.failf("ack: %d results for %d items", len(ack.Results), len(items))
	}
	for _, ir := range ack.Results {
		if !ir.Success {
			t.failf("ack item %d: %s", ir.Index, ir.Code)
		}
	}
	return len(res.Messages)
}

// cycler consumes as a consumer of a live queue does: each pop after the
// first carries the acks of the messages the one before returned, so a
// cycle is one request, one transaction (the ack's revision 1.2). Its
// requests are timed as "pop": they are what delivers.
type cycler struct {
	c       *queenside.Client
	t       *tally
	pending []queenside.AckItem
}

// next pops once, acking what the last pop returned, and returns how many
// messages came.
func (y *cycler) next(ctx context.Context, args queenside.PopArgs) int {
	start := time.Now()
	var res queenside.PopResult
	if len(y.pending) == 0 {
		var err error
		if res, err = y.c.Pop(ctx, args); err != nil {
			y.failed(ctx, start, "pop", err)
			return 0
		}
	} else {
		ack, err := y.c.AckAndPop(ctx, args, y.pending...)
		if err != nil {
			y.failed(ctx, start, "ack with pop", err)
			return 0
		}
		y.checkAck(ack, len(y.pending))
		y.pending = y.pending[:0]
		if ack.PopError != nil {
			y.failed(ctx, start, "pop after the ack", ack.PopError)
			return 0
		}
		res = *ack.Pop
	}
	y.t.took("pop", start)
	y.t.delivered(res.Messages, time.Now())
	if !args.AutoAck {
		for _, m := range res.Messages {
			y.pending = append(y.pending, m.Completed())
		}
	}
	return len(res.Messages)
}

// flush acks what the last pop returned.
func (y *cycler) flush(ctx context.Context) {
	if len(y.pending) == 0 {
		return
	}
	start := time.Now()
	ack, err := y.c.Ack(ctx, y.pending...)
	if err != nil {
		y.failed(ctx, start, "ack", err)
		return
	}
	y.t.took("ack", start)
	y.checkAck(ack, len(y.pending))
	y.pending = y.pending[:0]
}

func (y *cycler) checkAck(ack queenside.AckResult, items int) {
	if len(ack.Results) != items {
		y.t.failf("ack: %d results for %d items", len(ack.Results), items)
	}
	for _, ir := range ack.Results {
		if !ir.Success {
			y.t.failf("ack item %d: %s", ir.Index, ir.Code)
		}
	}
}

func (y *cycler) failed(ctx context.Context, start time.Time, what string, err error) {
	if ctx.Err() != nil { // an interrupted run is not the sidecar's error
		return
	}
	y.t.took("pop", start)
	y.t.failf("%s: %v", what, err)
	time.Sleep(10 * time.Millisecond) // do not spin on a failing sidecar
}

// backlogFor is the backlog a consuming scenario drains, pushed first if
// need be; r inherits the preparation's figures, or its failure (false).
func (b *bench) backlogFor(ctx context.Context, r *Result) (*backlog, bool) {
	bl, err := b.ensureBacklog(ctx)
	if err != nil {
		r.setupFailed(err)
		return nil, false
	}
	if bl.prep != nil {
		r.inherit("preparation push", bl.prep)
	}
	return bl, true
}
