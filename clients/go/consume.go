package queenside

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/queenside/queenside/protocol"
)

// Handler processes one message. Returning an error nacks it: the message
// and the rest of its span are delivered again, and its retry budget is
// charged.
type Handler func(ctx context.Context, m Message) error

// ConsumeOptions tune Consume. Zero values take the defaults.
type ConsumeOptions struct {
	Group        string // "" consumes in queue mode
	Partition    string // "" consumes any partition
	Batch        int    // messages per pop; default 10
	Partitions   int    // partitions per pop; default 1
	WaitMs       int    // long-poll wait; default 5000
	LeaseSeconds int    // default: the queue's lease time
	// RenewEvery is how often leases are renewed while handlers run;
	// default a third of the lease time.
	RenewEvery time.Duration

	// AckAsync sends the acks of completed messages in the background
	// while the next pop is already in flight, instead of waiting for each
	// batch's ack before popping again. At most one ack call is in flight;
	// what completes meanwhile is merged into the next call, so one call
	// may carry the items of several batches and leases. Leases are
	// renewed until their ack is answered. A batch with a handler failure
	// (a nack) or leases to release still waits for every pending ack,
	// its own included, before the loop pops again, so the rewind and the
	// release come after the acks, as without AckAsync. Stopping waits
	// for the pending acks, then releases what is left.
	AckAsync bool
	// OnAckError receives each failed asynchronous ack, as an *AckError
	// (refused items, or the ack call's error): the cursor did not move
	// for those items and their messages will be delivered again. It is
	// called from a goroutine of the consumer, one call at a time, and
	// should return quickly. When nil, a failed ack ends Consume, which
	// returns the *AckError once the pending acks were sent.
	OnAckError func(error)
}

func (o *ConsumeOptions) defaults() {
	if o.Batch <= 0 {
		o.Batch = 10
	}
	if o.Partitions <= 0 {
		o.Partitions = 1
	}
	if o.WaitMs <= 0 {
		o.WaitMs = 5000
	}
}

// settleTimeout bounds the acks and releases a stopping consumer still sends.
const settleTimeout = 10 * time.Second

// Consume pops messages of queue and hands them to h one at a time, in
// partition order, until ctx ends. Each call of h runs in a consumer span
// that joins the trace the message's headers carry (see tracing.go). Each message is acked completed when h
// returns nil and failed when it returns an error; the rest of that span is
// then left to be delivered again. Leases are renewed while h runs. When ctx
// ends, the message in hand is finished, what completed is acked, and the
// rest of the leases is released so that other consumers get it at once.
// Consume returns nil after a clean stop, or the error that ended it.
// Without opts.AckAsync, a batch's acks ride on the next pop, which the
// sidecar serves in the acks' transaction (AckAndPop): a cycle is one
// request. With opts.AckAsync, acks go in the background (see
// ConsumeOptions), and Consume returns only once every pending ack was
// answered.
func (c *Client) Consume(ctx context.Context, queue string, h Handler, opts ConsumeOptions) (err error) {
	opts.defaults()
	var ack *acker
	if opts.AckAsync {
		ack = newAcker(c, opts.OnAckError)
		defer func() {
			ack.wait()
			if aerr := ack.takeErr(); err == nil && aerr != nil {
				err = aerr
			}
		}()
	}
	// Without AckAsync, the acks of a batch ride on the next pop (one
	// request, one transaction: AckAndPop); those still held when the
	// loop stops are sent on their own.
	var carried []AckItem
	defer func() {
		if len(carried) > 0 {
			if aerr := c.settle(ctx, carried, nil); err == nil {
				err = aerr
			}
		}
	}()
	for ctx.Err() == nil {
		waitMs := opts.WaitMs
		if ack != nil && ack.busy() {
			// Our own pending acks may hold every partition there is, and
			// a lease ended by an ack wakes no waiting pop: look without
			// waiting, and wait for the acks if nothing came.
			waitMs = 0
		}
		args := PopArgs{
			Queue: queue, Group: opts.Group, Partition: opts.Partition, Batch: opts.Batch,
			Partitions: opts.Partitions, WaitMs: waitMs, LeaseSeconds: opts.LeaseSeconds,
		}
		res, err := c.popCarrying(ctx, args, &carried)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var qe *Error
			if errors.As(err, &qe) && qe.Retryable {
				time.Sleep(250 * time.Millisecond)
				continue
			}
			return fmt.Errorf("queenside: consume %s: %w", queue, err)
		}
		if ack != nil && len(res.Leases) == 0 && waitMs != opts.WaitMs {
			ack.wait()
			continue
		}
		if carried, err = c.handleBatch(ctx, res, h, opts, ack); err != nil {
			return err
		}
		if ack != nil && opts.OnAckError == nil {
			if err := ack.takeErr(); err != nil {
				return err
			}
		}
	}
	return nil
}

// popCarrying pops, carrying the acks *carried holds (AckAndPop). Once
// the sidecar has them, *carried is emptied, even if the pop that came
// with them failed; an error before that leaves them for the next try.
func (c *Client) popCarrying(ctx context.Context, args PopArgs, carried *[]AckItem) (PopResult, error) {
	if len(*carried) == 0 {
		return c.Pop(ctx, args)
	}
	ar, err := c.AckAndPop(ctx, args, *carried...)
	if err != nil {
		return PopResult{}, err
	}
	*carried = nil
	if ar.PopError != nil {
		return PopResult{}, ar.PopError
	}
	return *ar.Pop, nil
}

// handleBatch runs h over one pop's messages, lease by lease, and returns
// the acks for the next pop to carry. With ack (AckAsync), the acks of a
// batch that only completed messages are left to it, and so is stopping
// the renewals of its leases. Leases to release (the loop is stopping)
// are released at once, after the acks.
func (c *Client) handleBatch(ctx context.Context, res PopResult, h Handler, opts ConsumeOptions, ack *acker) ([]AckItem, error) {
	if len(res.Leases) == 0 {
		return nil, nil
	}
	stopRenew := c.keepRenewing(res.Leases, opts)
	renewing := true
	defer func() {
		if renewing {
			stopRenew()
		}
	}()

	byLease := map[string][]Message{}
	for _, m := range res.Messages {
		byLease[m.LeaseID] = append(byLease[m.LeaseID], m)
	}
	var acks []AckItem
	var release []string
	for _, l := range res.Leases {
		for _, m := range byLease[l.LeaseID] {
			if ctx.Err() != nil { // stopping: give back what was not started
				release = append(release, l.LeaseID)
				break
			}
			hctx, span := startProcess(ctx, m, opts.Group)
			err := h(hctx, m)
			endProcess(span, err)
			if err == nil {
				acks = append(acks, Completed(m))
				continue
			}
			if ctx.Err() != nil { // interrupted, not failed: charge nothing
				release = append(release, l.LeaseID)
			} else {
				acks = append(acks, Failed(m, err.Error()))
			}
			break // the rest of this span comes again after the rewind
		}
	}
	if ack != nil {
		failed := false
		for _, a := range acks {
			failed = failed || a.Status == protocol.AckFailed
		}
		if !failed && len(release) == 0 {
			renewing = false
			ack.add(acks, stopRenew)
			return nil, nil
		}
		// A failure or a release: every pending ack goes first, so that
		// none is refused because its lease was released or rewound.
		ack.add(acks, nil)
		ack.wait()
		acks = nil
	}
	if len(release) == 0 {
		// The leases were renewed a moment ago: they outlive the short
		// wait for the next pop, which carries their acks.
		return acks, nil
	}
	return nil, c.settle(ctx, acks, release)
}

// settle sends acks, then releases leases, even while ctx ends.
func (c *Client) settle(ctx context.Context, acks []AckItem, release []string) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	if len(acks) > 0 {
		if _, err := c.Ack(sctx, acks...); err != nil {
			return fmt.Errorf("queenside: ack: %w", err)
		}
	}
	if len(release) > 0 {
		if _, err := c.Release(sctx, release...); err != nil {
			return fmt.Errorf("queenside: release: %w", err)
		}
	}
	return nil
}

// keepRenewing renews leases periodically until the returned func is called.
func (c *Client) keepRenewing(leases []Lease, opts ConsumeOptions) func() {
	every := opts.RenewEvery
	if every <= 0 {
		every = time.Until(leases[0].ExpiresAt) / 3
	}
	if every <= 0 {
		every = time.Second
	}
	ids := make([]string, len(leases))
	for i, l := range leases {
		ids[i] = l.LeaseID
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				ctx, cancel := context.WithTimeout(context.Background(), every)
				c.Renew(ctx, opts.LeaseSeconds, ids...) //nolint:errcheck // a lost renewal shows as lease_expired on ack
				cancel()
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}
