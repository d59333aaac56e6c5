package verify

import (
	"context"
	"math/rand/v2"
	"time"

	queenside "github.com/queenside/queenside/clients/go"
)

// consumer is one connection popping from the group's queue.
type consumer struct {
	g      *group
	name   string
	rng    *rand.Rand
	client *queenside.Client
	sc     *sidecar
}

// connect opens a connection to a randomly chosen sidecar that is up.
func (c *consumer) connect(ctx context.Context) bool {
	var b backoff
	for attempt := 0; ; attempt++ {
		if attempt > 0 && !b.wait(ctx) {
			return false
		}
		s := c.g.sidecars[c.rng.IntN(len(c.g.sidecars))]
		if !s.up() {
			continue
		}
		dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		cl, err := queenside.Dial(dctx, s.socket)
		cancel()
		if err != nil {
			c.g.stats.add("retry:dial", 1)
			continue
		}
		c.client, c.sc = cl, s
		return true
	}
}

func (c *consumer) disconnect() {
	if c.client != nil {
		c.client.Close()
		c.client, c.sc = nil, nil
	}
}

// run pops, records and settles until ctx ends (false) or a fault kills
// this consumer (true).
func (c *consumer) run(ctx context.Context) bool {
	defer c.disconnect()
	var b backoff
	for ctx.Err() == nil {
		if c.client != nil && c.client.Draining() {
			c.disconnect() // the sidecar is stopping: go to another
		}
		if c.client == nil && !c.connect(ctx) {
			return false
		}
		res, err := c.pop(ctx)
		if ctx.Err() != nil {
			return false
		}
		if !c.handled(err, "pop") {
			b.wait(ctx)
			continue
		}
		b.reset()
		if len(res.Messages) == 0 {
			continue
		}
		c.record(res)
		select {
		case o := <-c.g.orders:
			if o.kind == FaultConsumerKill {
				c.die(o, res)
				return true
			}
			c.expire(ctx, o, res)
		default:
			c.settle(ctx, res, earliestExpiry(res).Add(time.Second))
		}
	}
	return false
}

func (c *consumer) pop(ctx context.Context) (queenside.PopResult, error) {
	cfg := c.g.cfg
	rctx, cancel := context.WithTimeout(ctx, time.Duration(cfg.WaitMs)*time.Millisecond+requestTimeout)
	defer cancel()
	return c.client.Pop(rctx, queenside.PopArgs{
		Queue: c.g.queueName, Group: c.g.groupName, Batch: cfg.PopBatch, Partitions: cfg.PopPartitions,
		WaitMs: cfg.WaitMs, LeaseSeconds: cfg.LeaseSeconds,
	})
}

// handled counts a failed call and drops the connection when it is no
// longer usable; it reports whether err is nil.
func (c *consumer) handled(err error, op string) bool {
	cls := classify(err)
	switch cls {
	case errNone:
		return true
	case errReconnect:
		c.disconnect()
	case errUnexpected, errConflict:
		c.g.stats.sample("%s %s: %v", c.name, op, err)
		c.g.stats.add("unexpected", 1)
	}
	c.g.stats.add("retry:"+op+":"+errCode(err), 1)
	return false
}

// record hands every delivered message to the queue's auditor, and, for
// the checker, measures the end-to-end latency of first receipts.
func (c *consumer) record(res queenside.PopResult) {
	now := time.Now()
	var fresh int64
	var lat []time.Duration
	for _, m := range res.Messages {
		e, first := c.g.audit.deliver(m)
		if !first {
			continue
		}
		fresh++
		if c.g.lat != nil {
			lat = append(lat, e.age(now))
		}
	}
	c.g.tl.add(c.g.label, now, fresh)
	if c.g.lat != nil {
		c.g.lat.add(now, lat)
	}
}
