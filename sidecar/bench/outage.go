package bench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"time"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
)

// scenarioSpool measures pushing while PostgreSQL is down: it stops the
// bench's PostgreSQL as a crash would (immediate mode) and pushes
// cfg.Messages, every one of which must come back buffered, fsynced in the
// sidecar's disk spool.
func (b *bench) scenarioSpool(ctx context.Context) Result {
	r := Result{Name: ScenarioSpool}
	queue := b.queue(ScenarioSpool)
	conns, done, err := b.prepare(ctx, &r, queue, b.cfg.Connections)
	if err != nil {
		return r
	}
	defer done()
	if err := b.pg.Stop("immediate"); err != nil {
		r.setupFailed(fmt.Errorf("stop PostgreSQL: %w", err))
		return r
	}
	bt := b.newBatcher(queue, ScenarioSpool, b.cfg.Partitions)
	var next atomic.Int64
	batch, n := int64(b.cfg.Batch), int64(b.cfg.Messages)
	m := b.probe.start()
	t := workers(conns, b.cfg.Inflight, func(w int, c *queenside.Client, t *tally) {
		for ctx.Err() == nil {
			from := next.Add(batch) - batch
			if from >= n {
				return
			}
			t.messages += pushWanting(ctx, c, t, bt.items(w, from, min(batch, n-from)), protocol.StatusBuffered)
		}
	})
	m.stop(&r)
	r.absorb(t, "push")
	b.spooled = &backlog{queue: queue, messages: t.messages}
	return r
}

// scenarioReplay starts PostgreSQL again and measures how long the sidecar
// takes to replay what spool left, from the moment PostgreSQL accepts
// connections to the moment the spool is empty.
func (b *bench) scenarioReplay(ctx context.Context) Result {
	r := Result{Name: ScenarioReplay}
	if b.spooled == nil {
		r.setupFailed(errors.New("replay needs the spool scenario's records; run both"))
		return r
	}
	c, err := queenside.Dial(ctx, b.socket)
	if err != nil {
		r.setupFailed(err)
		return r
	}
	defer c.Close()
	if err := b.pg.Restart(ctx); err != nil {
		r.setupFailed(fmt.Errorf("restart PostgreSQL: %w", err))
		return r
	}
	// A new postmaster: measure its CPU, not the stopped one's.
	if pid, err := readPIDFile(filepath.Join(b.pg.DataDir(), "postmaster.pid")); err == nil {
		b.probe.postmasterPID = pid
	}
	t := newTally()
	m := b.probe.start()
	deadline := time.Now().Add(b.cfg.StallTimeout + time.Duration(b.spooled.messages)*time.Millisecond)
	for ctx.Err() == nil {
		start := time.Now()
		h, err := c.Health(ctx)
		t.took("health", start)
		if err == nil && h.Status == protocol.HealthOK && h.Spool.Records == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.failf("the spool still holds %d records", h.Spool.Records)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	m.stop(&r)
	t.messages = b.spooled.messages
	r.absorb(t, "health")
	return r
}
