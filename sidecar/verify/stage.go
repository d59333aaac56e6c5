package verify

import (
	"context"
	"fmt"
	"time"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
)

// transaction is a stage's step: the acks of every consumed message and the
// pushes of the next queue's messages in one PostgreSQL transaction. The
// messages come partition by partition in offset order, and are pushed in
// that order, so each partition keeps its order in the next queue. The
// transaction ids derive from the consumed messages: a step retried after
// an unknown outcome, or redone by another consumer after a lease lapsed,
// pushes duplicates, never new messages.
func (c *consumer) transaction(ctx context.Context, res queenside.PopResult, giveUp time.Time) settleOutcome {
	acks, pushes, err := c.step(res)
	if err != nil {
		// A message that does not name its event was already reported by
		// the auditor; it cannot be passed on, and nothing is acked.
		c.g.stats.sample("%s: %v", c.name, err)
		c.g.stats.add("unexpected", 1)
		return settledGaveUp
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
		tr, err := c.client.Transaction(rctx, acks, pushes)
		cancel()
		if ctx.Err() != nil {
			return settledStopped
		}
		if classify(err) == errConflict {
			c.g.stats.add("conflicts", 1)
			return settledRefused
		}
		if !c.handled(err, "transaction") {
			continue
		}
		c.checkTransaction(tr, pushes)
		return settledCommitted
	}
}

// step builds a batch's acks and next-queue pushes.
func (c *consumer) step(res queenside.PopResult) ([]queenside.AckItem, []queenside.PushItem, error) {
	acks := make([]queenside.AckItem, len(res.Messages))
	pushes := make([]queenside.PushItem, len(res.Messages))
	for i, m := range res.Messages {
		id, err := nextTransactionID(m.TransactionID, c.g.queue)
		if err != nil {
			return nil, nil, fmt.Errorf("%s/%s offset %d: %w", m.Queue, m.Partition, m.Offset, err)
		}
		acks[i] = queenside.Completed(m)
		pushes[i] = queenside.PushItem{Queue: c.g.nextQueue, Partition: m.Partition, Payload: m.Payload, TransactionID: id}
	}
	return acks, pushes, nil
}

// checkTransaction looks at a committed transaction's results. Its pushes
// are stored in PostgreSQL or were already there (duplicate); a transaction
// is never spooled, so buffered would mean it was not atomic.
func (c *consumer) checkTransaction(tr queenside.TransactionResult, pushes []queenside.PushItem) {
	if len(tr.Pushes) != len(pushes) {
		c.g.stats.sample("%s: a transaction of %d pushes answered %d results", c.name, len(pushes), len(tr.Pushes))
		c.g.stats.add("unexpected", 1)
	}
	for i, r := range tr.Pushes {
		switch r.Status {
		case protocol.StatusQueued:
		case protocol.StatusDuplicate:
			// Not wrong (that is what deduplication is for), but a step is
			// never committed twice, so it is worth counting.
			c.g.stats.add("transaction-duplicate-pushes", 1)
		case protocol.StatusBuffered:
			c.g.vl.add(Violation{Kind: ViolationSpooledTxn, Queue: c.g.queue + 1, Consumer: c.g.label,
				Partition: r.Partition, Detail: fmt.Sprintf("push %d (%s) of a committed transaction came back buffered", i, r.TransactionID)})
		default:
			c.g.stats.sample("%s: transaction push %d (%s/%s): %s %v", c.name, i, r.Partition, r.TransactionID, r.Status, r.Error)
			c.g.stats.add("unexpected", 1)
		}
	}
	for _, a := range tr.Acks {
		if !a.Success {
			c.g.stats.sample("%s: a committed transaction answered ack %d with %s", c.name, a.Index, a.Code)
			c.g.stats.add("unexpected", 1)
		}
	}
}
