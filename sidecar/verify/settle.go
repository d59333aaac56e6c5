package verify

import (
	"context"
	"time"

	queenside "github.com/queenside/queenside/clients/go"
)

// settleOutcome is how a batch ended.
type settleOutcome string

const (
	settledCommitted settleOutcome = "committed"
	settledRefused   settleOutcome = "refused" // conflict, lease_expired or already_acked: nothing of it was recorded
	settledGaveUp    settleOutcome = "gave up" // no answer before the leases expired
	settledStopped   settleOutcome = "stopped" // the run ended
)

// settle commits the batch, a transaction for a stage and an ack for the
// checker, retrying on other connections until an answer comes or giveUp
// passes: after the leases expired, nothing can commit, and the messages
// come again.
func (c *consumer) settle(ctx context.Context, res queenside.PopResult, giveUp time.Time) settleOutcome {
	out := c.commit(ctx, res, giveUp)
	c.g.stats.add("batches:"+string(out), 1)
	return out
}

func (c *consumer) commit(ctx context.Context, res queenside.PopResult, giveUp time.Time) settleOutcome {
	if c.g.isChecker() {
		return c.ack(ctx, res, giveUp)
	}
	return c.transaction(ctx, res, giveUp)
}

// retryPause waits before another attempt at settling, reconnecting when
// the connection was dropped; false when the attempt should not be made.
func (c *consumer) retryPause(ctx context.Context, b *backoff, giveUp time.Time) bool {
	if time.Now().After(giveUp) || !b.wait(ctx) {
		return false
	}
	return c.client != nil || c.connect(ctx)
}

// earliestExpiry is when the first lease of a pop lapses: after it, a commit
// of the whole pop can only be refused, so retrying it is pointless.
func earliestExpiry(res queenside.PopResult) time.Time {
	var t time.Time
	for _, l := range res.Leases {
		if t.IsZero() || l.ExpiresAt.Before(t) {
			t = l.ExpiresAt
		}
	}
	if t.IsZero() { // no lease: nothing to wait for
		t = time.Now()
	}
	return t
}

// latestExpiry is when the last lease of a pop lapses.
func latestExpiry(res queenside.PopResult) time.Time {
	var t time.Time
	for _, l := range res.Leases {
		if l.ExpiresAt.After(t) {
			t = l.ExpiresAt
		}
	}
	return t
}
