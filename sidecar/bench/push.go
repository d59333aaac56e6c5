package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
)

// batcher builds push items for one queue. Message k goes to partition
// k mod the partition count, so every batch spreads over the partitions as
// keyed production does, and carries the transaction id
// <run>-<scenario>-<worker>-<k>: unique, so deduplication is exercised on
// every item without ever answering duplicate.
type batcher struct {
	queue      string
	idPrefix   string
	partitions []string
	pay        payloads
}

func (b *bench) newBatcher(queue, scenario string, partitions int) batcher {
	names := make([]string, partitions)
	for i := range names {
		names[i] = "p" + strconv.Itoa(i)
	}
	return batcher{queue: queue, idPrefix: b.runID + "-" + scenario + "-", partitions: names, pay: b.pay}
}

// items returns messages from..from+n-1, stamped with the time now.
func (bt batcher) items(worker int, from, n int64) []queenside.PushItem {
	now := time.Now()
	items := make([]queenside.PushItem, n)
	prefix := bt.idPrefix + strconv.Itoa(worker) + "-"
	for i := range items {
		k := from + int64(i)
		items[i] = queenside.PushItem{
			Queue:         bt.queue,
			Partition:     bt.partitions[k%int64(len(bt.partitions))],
			Payload:       bt.pay.stamped(now),
			TransactionID: prefix + strconv.FormatInt(k, 10),
		}
	}
	return items
}

// pushOnce sends one push request and checks that every item is queued.
// It returns how many were.
func pushOnce(ctx context.Context, c *queenside.Client, t *tally, items []queenside.PushItem) int64 {
	return pushWanting(ctx, c, t, items, protocol.StatusQueued)
}

// pushWanting sends one push request and checks that every item comes back
// with the status wanted. It returns how many did.
func pushWanting(ctx context.Context, c *queenside.Client, t *tally, items []queenside.PushItem, want string) int64 {
	start := time.Now()
	res, err := c.Push(producerContext(ctx), items...)
	if err != nil {
		if ctx.Err() == nil { // an interrupted run is not the sidecar's error
			t.took("push", start)
			t.failf("push: %v", err)
		}
		return 0
	}
	t.took("push", start)
	if len(res) != len(items) {
		t.failf("push: %d results for %d items", len(res), len(items))
	}
	var ok int64
	for _, r := range res {
		if r.Status == want {
			ok++
			continue
		}
		t.failf("push item %s: %s %v, want %s", r.TransactionID, r.Status, r.Error, want)
	}
	return ok
}

// pushAll pushes n messages in batches from every worker, each taking the
// next batch until none is left, and returns what the workers saw; its
// messages are the items queued.
func (b *bench) pushAll(ctx context.Context, conns []*queenside.Client, bt batcher, n int64) *tally {
	var next atomic.Int64 // the first message of the next batch
	batch := int64(b.cfg.Batch)
	return workers(conns, b.cfg.Inflight, func(w int, c *queenside.Client, t *tally) {
		for ctx.Err() == nil {
			from := next.Add(batch) - batch
			if from >= n {
				return
			}
			t.messages += pushOnce(ctx, c, t, bt.items(w, from, min(batch, n-from)))
		}
	})
}

// sealPayloads is Config.Encrypt of the run under way: every queue the
// scenarios configure encrypts its payloads.
var sealPayloads atomic.Bool

// configure gives a queue the default options explicitly, deduplication
// included, so the measured work never includes creating the queue and
// does not depend on what the defaults may become.
func configure(ctx context.Context, c *queenside.Client, queue string) error {
	opts := queenside.DefaultQueueOptions()
	opts.EncryptPayloads = sealPayloads.Load()
	if _, err := c.Configure(ctx, queue, opts); err != nil {
		return fmt.Errorf("configure %s: %w", queue, err)
	}
	return nil
}

// scenarioPush measures pushing cfg.Messages over cfg.Partitions, and
// leaves them as the backlog popack and autoack consume.
func (b *bench) scenarioPush(ctx context.Context) Result {
	r := b.pushScenario(ctx, ScenarioPush, b.cfg.Partitions)
	return r
}

// scenarioPartitions is push over cfg.ScalePartitions partitions.
func (b *bench) scenarioPartitions(ctx context.Context) Result {
	return b.pushScenario(ctx, ScenarioPartitions, b.cfg.ScalePartitions)
}

func (b *bench) pushScenario(ctx context.Context, name string, partitions int) Result {
	r := Result{Name: name}
	queue := b.queue(name)
	conns, done, err := b.prepare(ctx, &r, queue, b.cfg.Connections)
	if err != nil {
		return r
	}
	defer done()
	writes := b.countWrites(ctx)
	m := b.probe.start()
	t := b.pushAll(ctx, conns, b.newBatcher(queue, name, partitions), int64(b.cfg.Messages))
	m.stop(&r)
	r.absorb(t, "push")
	r.Writes = writes(t.messages)
	if name == ScenarioPush {
		b.backlog = &backlog{queue: queue, messages: t.messages}
	}
	return r
}

// prepare dials n connections and configures queue; a failure is the
// scenario's error.
func (b *bench) prepare(ctx context.Context, r *Result, queue string, n int) ([]*queenside.Client, func(), error) {
	conns, done, err := dial(ctx, b.socket, n)
	if err == nil {
		if err = configure(ctx, conns[0], queue); err != nil {
			done()
		}
	}
	if err != nil {
		r.setupFailed(err)
		return nil, nil, err
	}
	return conns, done, nil
}
