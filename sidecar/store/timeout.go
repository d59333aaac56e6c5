package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The database timeout. A database that stops answering without an error
// (a host frozen by a storage stall, a network partition that drops packets
// silently) keeps its TCP connections open: without a bound of our own, a
// call would wait for as long as the outage lasts, plus whatever TCP's
// retransmission backoff adds. Every call a request or a background loop
// makes is bounded by Bound, so it ends within Options.Timeout; what it
// ended is told apart from the request's own deadline by its cause, a
// *TimeoutError, which IsUnavailable takes for the database out of reach.

// DefaultTimeout is Options.Timeout's default.
const DefaultTimeout = 5 * time.Second

// TimeoutError is the cause of a context Bound ended: PostgreSQL did not
// answer within the database timeout. As an error of a call, it means the
// call may or may not have taken effect.
type TimeoutError struct {
	After time.Duration
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("PostgreSQL did not answer within %v (--database-timeout)", e.After)
}

// Timeout is the bound on one call to the database.
func (s *Store) Timeout() time.Duration { return s.timeout }

// Bound returns ctx ending after the database timeout at the latest, with a
// *TimeoutError as its cause when that is what ends it. A deadline of ctx's
// own that comes first keeps its cause. The call is counted as timed out
// (Timeouts) when its bound ended before cancel was called.
func (s *Store) Bound(ctx context.Context) (context.Context, context.CancelFunc) {
	te := &TimeoutError{After: s.timeout}
	ctx, cancel := context.WithTimeoutCause(ctx, s.timeout, te)
	return ctx, func() {
		if context.Cause(ctx) == error(te) {
			s.timeouts.Add(1)
		}
		cancel()
	}
}

// Timeouts counts the calls the database timeout ended.
func (s *Store) Timeouts() uint64 { return s.timeouts.Load() }

// TimedOut returns err, or, when ctx was ended by Bound's timeout, that
// *TimeoutError wrapping err: the error a caller can tell an unanswered
// database by (IsUnavailable, AsTimeout).
func TimedOut(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	var te *TimeoutError
	if errors.As(err, &te) || !errors.As(context.Cause(ctx), &te) {
		return err
	}
	return &timedOut{te: te, err: err}
}

// AsTimeout returns the *TimeoutError err carries, or nil.
func AsTimeout(err error) *TimeoutError {
	var te *TimeoutError
	if errors.As(err, &te) {
		return te
	}
	return nil
}

// timedOut is an error of a call the database timeout ended.
type timedOut struct {
	te  *TimeoutError
	err error
}

func (e *timedOut) Error() string   { return e.te.Error() }
func (e *timedOut) Unwrap() []error { return []error{e.te, e.err} }
