package verify

import (
	"context"
	"time"

	queenside "github.com/queenside/queenside/clients/go"
)

// die carries out FaultConsumerKill: the consumer stops mid-batch, acking
// and releasing nothing, and its connection goes away with it. The leases
// must lapse before anyone else receives these messages.
func (c *consumer) die(o *order, res queenside.PopResult) {
	o.take(c.name, c.g.queue, res, c.g.cfg.Partitions)
	c.disconnect()
	o.finish("abandoned without ack", false)
}

// expiryOverhang is how long past the latest lease's expiry a lease-expiry
// fault holds its messages. The expiry is PostgreSQL's clock, on this
// machine; the margin covers the time the pop took to answer.
const expiryOverhang = 1500 * time.Millisecond

// expire carries out FaultLeaseExpiry: it holds the messages until every
// lease of the pop has expired, then commits as if nothing happened. That
// commit must be refused (conflict for a stage, lease_expired for the
// checker), and the messages must come again.
func (c *consumer) expire(ctx context.Context, o *order, res queenside.PopResult) {
	o.take(c.name, c.g.queue, res, c.g.cfg.Partitions)
	if !sleep(ctx, time.Until(latestExpiry(res).Add(expiryOverhang))) {
		o.finish("interrupted", false)
		return
	}
	switch out := c.settle(ctx, res, time.Now().Add(30*time.Second)); out {
	case settledCommitted:
		o.finish("committed after the leases expired", true) // a violation, reported with the faults
	case settledRefused:
		o.finish("refused as expected ("+c.refusal()+")", false)
	default:
		o.finish("no answer: "+string(out), false)
	}
}

func (c *consumer) refusal() string {
	if c.g.isChecker() {
		return "lease_expired"
	}
	return "conflict"
}
