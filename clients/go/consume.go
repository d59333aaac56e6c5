package queenside

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/queenside/queenside/protocol"
)

// Handler processes one message. Returning an error nacks it: the message
// and the rest of its span are delivered again, and its retry budget is
// charged.
type Handler func(ctx context.Context, m Message) error

// ConsumeOptions tune Consume. Zero values take the defaults.
type ConsumeOptions struct {
	Group     string // "" consumes in queue mode
	Partition string // "" consumes any partition
	// Batch is the most messages a pop returns, over all its partitions;
	// default 100. Partitions is the most partitions a pop leases; default
	// 100. Over many partitions each holding a few messages, a pop then
	// serves what is waiting in up to 100 of them in one round trip,
	// rather than one partition's few messages.
	Batch      int
	Partitions int
	WaitMs     int // long-poll wait; default 5000
	// Concurrency is how many handlers run at once over the partitions of
	// a pop: each partition's messages go to one call of h after another,
	// in offset order, and different partitions run in parallel; default
	// 1. Above 1, h must be safe to call from several goroutines. Raise it
	// when h waits (on I/O, another service): a pop that takes a burst of
	// 100 messages over 100 partitions is then not handled one message
	// after another.
	Concurrency int
	// LeaseSeconds is how long a pop's leases last, renewed while handlers
	// run; default the queue's leaseSeconds (60 unless configured). It is
	// also how long a crashed consumer's partitions wait before another
	// consumer gets them.
	LeaseSeconds int
	// RenewEvery is how often leases are renewed while handlers run;
	// default a third of the lease time.
	RenewEvery time.Duration

	// IgnoreSignals leaves SIGINT and SIGTERM alone. By default the first
	// of them that the process receives while Consume runs stops it as
	// ctx's end does, and the handling in place before Consume is restored
	// at once, so that a second one acts as it would without Consume (by
	// default, it ends the process).
	IgnoreSignals bool

	// Logger receives a warning for each handler failure (queue,
	// partition, offset, error, failures, retryIn) and, without AckAsync,
	// for each ack item refused (queue, lease, code; its message will be
	// delivered again), already_acked excepted. nil is slog.Default().
	Logger *slog.Logger

	// FailureBackoff is how long the loop waits, after a handler failed on
	// a message, before it nacks it, holding the lease (renewed) so that
	// the partition's order is kept; the zero value takes the defaults
	// (see Backoff).
	FailureBackoff Backoff

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
		o.Batch = 100
	}
	if o.Partitions <= 0 {
		o.Partitions = 100
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 1
	}
	if o.WaitMs <= 0 {
		o.WaitMs = 5000
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Backoff says how long Consume waits after a handler failed on a message
// before it nacks it (which charges its retry budget and delivers it
// again): Delay(n) after the nth failure in a row of that message.
type Backoff struct {
	// Initial is the wait after a first failure (default 1 s); each failure
	// in a row doubles it, up to Max (default 60 s).
	Initial, Max time.Duration
	// Disabled nacks a failure at once.
	Disabled bool
}

// Delay is the wait after the nth failure in a row of a message:
// min(Initial * 2^(n-1), Max), with the defaults for zero fields; 0 when
// Disabled.
func (b Backoff) Delay(failures int) time.Duration {
	if b.Disabled {
		return 0
	}
	if b.Initial <= 0 {
		b.Initial = time.Second
	}
	if b.Max <= 0 {
		b.Max = time.Minute
	}
	d := b.Initial
	for i := 1; i < failures && d < b.Max; i++ {
		d *= 2
	}
	return min(d, b.Max)
}

// ConsumeStats counts what a Consume handled.
type ConsumeStats struct {
	// Completed counts the messages whose handler returned nil, Failed
	// those whose handler returned an error, each time it did (a message
	// retried twice counts twice). A handler that returned an error once
	// ctx had ended was interrupted, not failed: its message is released,
	// uncharged, and counts in neither.
	Completed, Failed int
}

// errNoHandler is Consume's answer to a nil handler.
var errNoHandler = errors.New("queenside: consume needs a handler")

// MaxConcurrency bounds ConsumeOptions.Concurrency, as in the Python and
// Node clients: a handler runs a lease, and a pop leases at most that many
// partitions, so a higher concurrency would never be used.
const MaxConcurrency = protocol.MaxPopPartitions

// settleTimeout bounds the acks and releases a stopping consumer still sends.
const settleTimeout = 10 * time.Second

// Consume pops messages of queue and hands them to h, each partition's one
// at a time and in order (up to opts.Concurrency partitions of a pop at
// once), until ctx ends (cancelled or past its deadline) or the
// process receives SIGINT or SIGTERM (unless opts.IgnoreSignals). Each call
// of h runs in a consumer span that joins the trace the message's headers
// carry (see tracing.go). Each message is acked completed when h returns
// nil; when h returns an error, the failure is logged (opts.Logger), the
// loop waits opts.FailureBackoff's delay holding the lease, and acks the
// message failed: it and the rest of its span are then delivered again.
// Leases are renewed while h runs and during that wait.
//
// On a stop, the message in hand is finished (h's ctx is ctx: a signal does
// not cancel it), what completed is acked, and the rest of the leases is
// released so that other consumers get it at once. A long-poll in flight is
// not waited for: its answer, when it comes, has its leases released. A
// stop is clean: Consume returns what it handled and a nil error; an error
// is what ended it otherwise. A nil h and a Concurrency above MaxConcurrency are refused
// before anything is sent.
// Without opts.AckAsync, a batch's acks ride on the next pop, which the
// sidecar serves in the acks' transaction (AckAndPop): a cycle is one
// request. With opts.AckAsync, acks go in the background (see
// ConsumeOptions), and Consume returns only once every pending ack was
// answered.
func (c *Client) Consume(ctx context.Context, queue string, h Handler, opts ConsumeOptions) (stats ConsumeStats, err error) {
	if h == nil {
		return stats, errNoHandler
	}
	if opts.Concurrency > MaxConcurrency {
		return stats, fmt.Errorf("queenside: consume: concurrency %d is above %d", opts.Concurrency, MaxConcurrency)
	}
	opts.defaults()
	// stop ends the loops; the handlers get ctx itself.
	stop, cancel := context.WithCancel(ctx)
	defer cancel()
	if !opts.IgnoreSignals {
		defer stopOnSignals(cancel)()
	}
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
	return stats, c.consumeLoop(ctx, stop, queue, h, &opts, ack, &stats)
}

// consumeLoop pops, hands the batch to h and pops again, until stop ends
// or an error it cannot retry. Without
// AckAsync, a batch's acks ride on the next pop (one request, one
// transaction: AckAndPop); those still held when the loop stops are sent
// on their own.
func (c *Client) consumeLoop(ctx, stop context.Context, queue string, h Handler, opts *ConsumeOptions, ack *acker, stats *ConsumeStats) (err error) {
	var carried []AckItem
	defer func() {
		if len(carried) > 0 {
			if aerr := c.settle(ctx, opts.Logger, queue, carried, nil); err == nil {
				err = aerr
			}
		}
	}()
	for stop.Err() == nil {
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
		a, stopped := c.popUnlessStopped(stop, args, carried)
		if stopped {
			break // carried is sent again on its own: a repeat is harmless
		}
		if a.acked {
			logRefusedAcks(opts.Logger, queue, carried, a.acks)
			carried = nil
		}
		if a.err != nil {
			if stop.Err() != nil {
				break
			}
			var qe *Error
			if errors.As(a.err, &qe) && qe.Retryable {
				sleep(stop, 250*time.Millisecond)
				continue
			}
			return fmt.Errorf("queenside: consume %s: %w", queue, a.err)
		}
		res := a.pop
		if ack != nil && len(res.Leases) == 0 && waitMs != opts.WaitMs {
			ack.wait()
			continue
		}
		if carried, err = c.handleBatch(ctx, stop, res, h, opts, ack, stats); err != nil {
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

// stopOnSignals calls stop on the first SIGINT or SIGTERM (one the process
// does not ignore) and restores the signals' handling at once; the
// returned func restores it when no signal came.
func stopOnSignals(stop context.CancelFunc) (restore func()) {
	var sigs []os.Signal
	for _, s := range []os.Signal{os.Interrupt, syscall.SIGTERM} {
		if !signal.Ignored(s) {
			sigs = append(sigs, s)
		}
	}
	if len(sigs) == 0 {
		return func() {}
	}
	got := make(chan os.Signal, 1)
	signal.Notify(got, sigs...)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-got:
			signal.Stop(got)
			stop()
		case <-done:
		}
	}()
	return func() {
		signal.Stop(got)
		close(done)
		wg.Wait()
	}
}

// sleep waits d, or until stop ends.
func sleep(stop context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-stop.Done():
	}
}

// popAnswer is what a pop carrying acks brought back.
type popAnswer struct {
	pop   PopResult
	acked bool            // the sidecar answered the carried acks
	acks  []AckItemResult // its answers to them
	err   error
}

// popUnlessStopped pops, carrying the acks carried holds, and returns the
// answer, or stopped when stop ends first: the call is not waited for,
// and the leases its answer brings, when it comes, are released. (A
// client closed meanwhile loses the answer; the sidecar then releases
// them itself.) The carried acks may then have been applied or not:
// sending them again is harmless.
func (c *Client) popUnlessStopped(stop context.Context, args PopArgs, carried []AckItem) (a popAnswer, stopped bool) {
	answer := make(chan popAnswer, 1)
	go func() { answer <- c.popCarrying(context.WithoutCancel(stop), args, carried) }()
	select {
	case a = <-answer:
		return a, false
	case <-stop.Done():
		go func() {
			if l := (<-answer).pop.Leases; len(l) > 0 {
				c.settle(stop, nil, args.Queue, nil, leaseIDs(l)) //nolint:errcheck // else they expire
			}
		}()
		return a, true
	}
}

func leaseIDs(leases []Lease) []string {
	ids := make([]string, len(leases))
	for i, l := range leases {
		ids[i] = l.LeaseID
	}
	return ids
}

// popCarrying pops, carrying the acks carried holds (AckAndPop). The
// answer says whether the sidecar had them: an error before that leaves
// them for the next try.
func (c *Client) popCarrying(ctx context.Context, args PopArgs, carried []AckItem) (a popAnswer) {
	if len(carried) == 0 {
		a.pop, a.err = c.Pop(ctx, args)
		return a
	}
	ar, err := c.AckAndPop(ctx, args, carried...)
	if err != nil {
		a.err = err
		return a
	}
	a.acked, a.acks = true, ar.Results
	if ar.PopError != nil {
		a.err = ar.PopError
		return a
	}
	a.pop = *ar.Pop
	return a
}

// handleBatch runs h over one pop's messages, up to opts.Concurrency
// leases at once, each lease's messages in order, and returns the acks for
// the next pop to carry. A failure is acked once the wait
// its FailureBackoff gives has passed, after the other leases' messages
// were handled (the wait ends at once on a stop). With ack (AckAsync),
// the acks of a batch that only completed messages are left to it, and so
// is stopping the renewals of its leases. Leases to release (the loop is
// stopping) are released at once, after the acks.
func (c *Client) handleBatch(ctx, stop context.Context, res PopResult, h Handler, opts *ConsumeOptions, ack *acker, stats *ConsumeStats) ([]AckItem, error) {
	if len(res.Leases) == 0 {
		return nil, nil
	}
	stopRenew := c.keepRenewing(res.Leases, *opts)
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
	// Each lease (one partition) is handled by one worker, message after
	// message; up to opts.Concurrency leases at once.
	outcomes := make([]leaseOutcome, len(res.Leases))
	next := make(chan int, len(res.Leases))
	for i := range res.Leases {
		next <- i
	}
	close(next)
	var wg sync.WaitGroup
	for range min(opts.Concurrency, len(res.Leases)) {
		wg.Go(func() {
			for i := range next {
				l := res.Leases[i]
				outcomes[i] = handleLease(ctx, stop, l, byLease[l.LeaseID], h, opts)
			}
		})
	}
	wg.Wait()
	var acks []AckItem
	var release []string
	var retryAt time.Time // when the failures may be acked
	for i, o := range outcomes {
		acks = append(acks, o.acks...)
		if o.release {
			release = append(release, res.Leases[i].LeaseID)
		}
		if o.retryAt.After(retryAt) {
			retryAt = o.retryAt
		}
		stats.Completed += o.completed
		stats.Failed += o.failed
	}
	if !retryAt.IsZero() {
		sleep(stop, time.Until(retryAt))
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
	return nil, c.settle(ctx, opts.Logger, res.Leases[0].Queue, acks, release)
}

// leaseOutcome is what handling one lease's messages came to.
type leaseOutcome struct {
	acks              []AckItem
	release           bool      // stopping: the lease is given back
	retryAt           time.Time // a failure may be acked from then on; zero without one
	completed, failed int
}

// handleLease runs h over the messages of one lease, in order, until the
// first failure (the rest of the span comes again after the rewind) or a
// stop (what was not started is released).
func handleLease(ctx, stop context.Context, l Lease, msgs []Message, h Handler, opts *ConsumeOptions) (o leaseOutcome) {
	for _, m := range msgs {
		if stop.Err() != nil { // stopping: give back what was not started
			o.release = true
			return o
		}
		hctx, span := startProcess(ctx, m, opts.Group)
		err := h(hctx, m)
		endProcess(span, err)
		if err == nil {
			o.completed++
			o.acks = append(o.acks, Completed(m))
			continue
		}
		if ctx.Err() != nil { // interrupted, not failed: charge nothing
			o.release = true
			return o
		}
		o.failed++
		// The failures of m in a row, this one included: the lease's
		// headAttempts counts the deliveries of its first message.
		failures := 1
		if m.Offset == l.FromOffset && l.HeadAttempts > 1 {
			failures = l.HeadAttempts
		}
		delay := opts.FailureBackoff.Delay(failures)
		opts.Logger.Warn("queenside: handler failed; the message will be retried",
			"queue", m.Queue, "partition", m.Partition, "offset", m.Offset, "error", err,
			"failures", failures, "retryIn", delay)
		o.retryAt = time.Now().Add(delay)
		o.acks = append(o.acks, Failed(m, err.Error()))
		return o
	}
	return o
}

// settle sends acks, then releases leases, even while ctx ends; refused
// ack items are logged.
func (c *Client) settle(ctx context.Context, log *slog.Logger, queue string, acks []AckItem, release []string) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	if len(acks) > 0 {
		res, err := c.Ack(sctx, acks...)
		if err != nil {
			return fmt.Errorf("queenside: ack: %w", err)
		}
		logRefusedAcks(log, queue, acks, res.Results)
	}
	if len(release) > 0 {
		if _, err := c.Release(sctx, release...); err != nil {
			return fmt.Errorf("queenside: release: %w", err)
		}
	}
	return nil
}

// logRefusedAcks warns of each ack item refused: its message will be
// delivered again. One answered already_acked was settled by an earlier
// ack (one sent again after a stop, say), and is not a loss.
func logRefusedAcks(log *slog.Logger, queue string, items []AckItem, results []AckItemResult) {
	for _, r := range results {
		if r.Success || r.Code == protocol.ItemAlreadyAcked || r.Index < 0 || r.Index >= len(items) {
			continue
		}
		it := items[r.Index]
		log.Warn("queenside: "+describeAckItem(r.Index, it, r.Code)+"; the message will be delivered again",
			"queue", queue, "lease", it.LeaseID, "code", r.Code)
	}
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
