package verify

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/queenside/queenside/protocol"
)

// errClass is what a failed call tells its caller to do next.
type errClass int

const (
	errNone errClass = iota
	// errConflict: a transaction whose acks could not all succeed;
	// nothing was committed.
	errConflict
	// errRetry: a retryable answer (unavailable while PostgreSQL is down,
	// spool_full, overloaded...): the same request again after a pause.
	errRetry
	// errReconnect: the connection or the sidecar is gone, draining, or
	// did not answer in time: the same request on a new connection.
	errReconnect
	// errUnexpected: a non-retryable answer the run never provokes.
	errUnexpected
)

func classify(err error) errClass {
	if err == nil {
		return errNone
	}
	var pe *protocol.Error
	if !errors.As(err, &pe) {
		return errReconnect // broken connection, dial failure, our own request timeout
	}
	switch {
	case pe.Code == protocol.CodeConflict:
		return errConflict
	case pe.Code == protocol.CodeDraining:
		return errReconnect
	case pe.Retryable:
		return errRetry
	}
	return errUnexpected
}

// errCode names an error for the retry counts of the report.
func errCode(err error) string {
	var pe *protocol.Error
	switch {
	case errors.As(err, &pe):
		return string(pe.Code)
	case errors.Is(err, context.DeadlineExceeded):
		return "request-timeout"
	}
	return "connection"
}

// backoff spaces retries: 50 ms doubling to 1 s, with jitter so that the
// consumers of a stage do not retry in step.
type backoff struct{ next time.Duration }

const (
	backoffFirst = 50 * time.Millisecond
	backoffMax   = time.Second
)

// wait sleeps and reports whether ctx is still live.
func (b *backoff) wait(ctx context.Context) bool {
	if b.next == 0 {
		b.next = backoffFirst
	}
	d := b.next/2 + rand.N(b.next/2+1)
	b.next = min(2*b.next, backoffMax)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (b *backoff) reset() { b.next = 0 }

// sleep waits d unless ctx ends first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
