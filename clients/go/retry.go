package queenside

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/queenside/queenside/protocol"
)

// RetryPolicy says how a call answered unavailable or draining is sent
// again, when the rule of retry_rule.go allows it. The zero value of a
// field takes its default (DefaultRetryPolicy); the three clients share
// the rule and the defaults.
type RetryPolicy struct {
	// Disabled turns automatic retries off: every answer goes to the caller.
	Disabled bool
	// InitialDelay is the first pause (default 50 ms); each pause doubles
	// it, up to MaxDelay (default 1 s). A pause is drawn between half and
	// all of that, so that clients refused together do not all come back
	// at the same moment.
	InitialDelay time.Duration
	MaxDelay     time.Duration
	// MaxElapsed bounds the retries of a call whose context has no
	// deadline (default 5 s): no attempt starts later than that after the
	// call began. A call with a deadline is retried until its deadline.
	MaxElapsed time.Duration
}

// DefaultRetryPolicy is the policy of a client dialed without WithRetry.
var DefaultRetryPolicy = RetryPolicy{
	InitialDelay: 50 * time.Millisecond,
	MaxDelay:     time.Second,
	MaxElapsed:   5 * time.Second,
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.InitialDelay <= 0 {
		p.InitialDelay = DefaultRetryPolicy.InitialDelay
	}
	if p.MaxDelay <= 0 {
		p.MaxDelay = DefaultRetryPolicy.MaxDelay
	}
	if p.MaxElapsed <= 0 {
		p.MaxElapsed = DefaultRetryPolicy.MaxElapsed
	}
	return p
}

// Option changes how Dial sets up a client.
type Option func(*dialOptions)

type dialOptions struct {
	retry RetryPolicy
}

// WithRetry sets the client's retry policy.
func WithRetry(p RetryPolicy) Option {
	return func(o *dialOptions) { o.retry = p.withDefaults() }
}

// WithoutRetry turns automatic retries off.
func WithoutRetry() Option { return WithRetry(RetryPolicy{Disabled: true}) }

// Call sends op with args and decodes the result into result (which may be
// nil). The context's deadline travels as the request's timeoutMs. An
// answer of unavailable or draining is retried, with growing pauses, when
// retry_rule.go says a repeat cannot do harm, until the context's deadline
// (or the policy's MaxElapsed without one); then the last answer is
// returned. The context's end during a pause returns its error.
func (c *Client) Call(ctx context.Context, op string, args any, result any) error {
	start := time.Now()
	err := c.call(ctx, op, args, result)
	if err == nil || c.retry.Disabled {
		return err
	}
	b := backoff{policy: c.retry, deadline: start.Add(c.retry.MaxElapsed), delay: c.retry.InitialDelay}
	if dl, ok := ctx.Deadline(); ok {
		b.deadline = dl
	}
	for c.mayRetry(op, args, err) {
		pause, ok := b.next()
		if !ok {
			return err
		}
		if perr := c.pause(ctx, pause); perr != nil {
			if errors.Is(perr, context.DeadlineExceeded) {
				return err // the deadline came first: the last answer stands
			}
			return perr
		}
		// The drain notice may have come during the pause; and an attempt
		// with less than a millisecond left could only time out.
		if c.Draining() || time.Until(b.deadline) < time.Millisecond {
			return err
		}
		err = c.call(ctx, op, args, result)
	}
	return err
}

// mayRetry applies the rule to err. Once the sidecar announced its drain
// on this connection, no answer on it will change: the caller should go
// to another sidecar, at once.
func (c *Client) mayRetry(op string, args any, err error) bool {
	var pe *protocol.Error
	return errors.As(err, &pe) && !c.Draining() && mayRetry(op, args, pe.Code)
}

// pause waits d; it returns ctx's error if ctx ends first, and ErrClosed
// (or what broke the connection) if the connection ends.
func (c *Client) pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.done:
		return c.closedErr()
	}
}

// backoff hands out the pauses between attempts of one call.
type backoff struct {
	policy   RetryPolicy
	deadline time.Time
	delay    time.Duration
}

// next is the pause before the next attempt; false when that attempt
// would start after the deadline.
func (b *backoff) next() (time.Duration, bool) {
	d := b.delay/2 + rand.N(b.delay/2+1)
	b.delay = min(2*b.delay, b.policy.MaxDelay)
	return d, time.Now().Add(d).Before(b.deadline)
}
