package queenside

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
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
func (c *Client) Consume(ctx context.Context, queue string, h Handler, opts ConsumeOptions) error {
	opts.defaults()
	for ctx.Err() == nil {
		res, err := c.Pop(ctx, PopArgs{
			Queue: queue, Group: opts.Group, Partition: opts.Partition, Batch: opts.Batch,
			Partitions: opts.Partitions, WaitMs: opts.WaitMs, LeaseSeconds: opts.LeaseSeconds,
		})
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
		if err := c.handleBatch(ctx, res, h, opts); err != nil {
			return err
		}
	}
	return nil
}

// handleBatch runs h over one pop's messages, lease by lease.
func (c *Client) handleBatch(ctx context.Context, res PopResult, h Handler, opts ConsumeOptions) error {
	if len(res.Leases) == 0 {
		return nil
	}
	stopRenew := c.keepRenewing(res.Leases, opts)
	defer stopRenew()

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
