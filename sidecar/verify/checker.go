package verify

import (
	"context"
	"time"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
)

// ack is the checker's settling of a batch: a plain ack of every message it
// recorded. The checker pushes nothing, so it needs no transaction; what it
// fails to ack (a lease that lapsed) comes again and counts as a
// redelivery, not a duplicate.
func (c *consumer) ack(ctx context.Context, res queenside.PopResult, giveUp time.Time) settleOutcome {
	items := make([]queenside.AckItem, len(res.Messages))
	for i, m := range res.Messages {
		items[i] = queenside.Completed(m)
	}
	var b backoff
	for attempt := 0; ; attempt++ {
		if attempt > 0 && !c.retryPause(ctx, &b, giveUp) {
			if ctx.Err() != nil {
				return settledStopped
			}
			return settledGaveUp
		}
		rctx, cancel := context.WithTimeout(ctx, requestTimeout)
		ar, err := c.client.Ack(rctx, items...)
		cancel()
		if ctx.Err() != nil {
			return settledStopped
		}
		if !c.handled(err, "ack") {
			continue
		}
		var ok, unavailable, refused int
		for _, r := range ar.Results {
			switch {
			case r.Success:
				ok++
			case r.Code == string(protocol.CodeUnavailable):
				unavailable++
			default:
				refused++
				c.g.stats.add("ack-refused:"+r.Code, 1)
			}
		}
		switch {
		case unavailable > 0: // PostgreSQL is down: nothing was applied
			c.g.stats.add("retry:ack:unavailable", 1)
			continue
		case refused > 0 && ok == 0:
			return settledRefused
		}
		// Everything acked, or some leases lapsed and the others' acks
		// committed: the lapsed ones come again.
		return settledCommitted
	}
}
