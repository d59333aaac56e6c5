package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
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
	// By names what set the bound, for the one who reads the error;
	// empty, --database-timeout.
	By string
}

func (e *TimeoutError) Error() string {
	by := e.By
	if by == "" {
		by = "--database-timeout"
	}
	return fmt.Sprintf("PostgreSQL did not answer within %v (%s)", e.After, by)
}

// Timeout is the bound on one call to the database.
func (s *Store) Timeout() time.Duration { return s.timeout }

// CancelGrace is the part of the database timeout T a call cut short
// leaves PostgreSQL to confirm that it cancelled the call's statement: T/5.
// A call is given the rest to answer; then a cancel request goes out, and
// if PostgreSQL confirms it in time the connection goes back to the pool
// with its session, else it is closed (a frozen or unreachable server).
//
// Keeping the session is what lets a loaded database recover. A session
// costs PostgreSQL a process and its caches, and on Citus the
// coordinator's connections to its workers and its metadata: when every
// call the timeout ended closed its connection, a database slowed by a
// stall (a Citus worker thawed, the spools replaying) got new sessions as
// fast as calls timed out, each one's first calls were the slowest and
// timed out in turn, and the sidecars stood still for minutes.
func CancelGrace(timeout time.Duration) time.Duration { return timeout / 5 }

// Bound returns ctx ending after the database timeout at the latest, less
// CancelGrace, with a *TimeoutError as its cause when that is what ends
// it: a call it ends is over, its cancel included, within the timeout
// (the rollback of a transaction it left open may take CancelGrace more,
// should PostgreSQL stall right after confirming the cancel). A
// deadline of ctx's own that comes first keeps its cause (and the call may
// then take up to CancelGrace more). The call is counted as timed out
// (Timeouts) when its bound ended before cancel was called.
func (s *Store) Bound(ctx context.Context) (context.Context, context.CancelFunc) {
	te := &TimeoutError{After: s.timeout}
	ctx, cancel := context.WithTimeoutCause(ctx, s.timeout-CancelGrace(s.timeout), te)
	return ctx, func() {
		if context.Cause(ctx) == error(te) {
			s.timeouts.Add(1)
		}
		cancel()
	}
}

// cleanupContext is ctx's values without its end, bounded by CancelGrace:
// for rolling back what a call left open once the call's own context is
// done (cut short, its cancel confirmed), so that the connection goes back
// to the pool rather than being closed, without a wait the timeout does
// not bound.
func (s *Store) cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), CancelGrace(s.timeout))
}

// release returns conn to the pool. One left inside a transaction (its
// call failed or was cut short before its COMMIT or ROLLBACK) is rolled
// back first: the pool closes a connection it gets back in a transaction.
func (s *Store) release(ctx context.Context, conn *pgxpool.Conn) {
	if pc := conn.Conn().PgConn(); !pc.IsClosed() && !pc.IsBusy() && pc.TxStatus() != 'I' {
		cctx, cancel := s.cleanupContext(ctx)
		conn.Exec(cctx, "ROLLBACK") //nolint:errcheck // on failure the pool closes it, as before
		cancel()
	}
	conn.Release()
}

// inTx runs fn in a transaction of opts on a pooled connection and commits
// it, or rolls it back when fn fails (as pgx.BeginTxFunc, but rolling back
// within cleanupContext, so that a call cut short keeps its connection).
func (s *Store) inTx(ctx context.Context, opts pgx.TxOptions, fn func(pgx.Tx) error) error {
	tx, err := s.pool.BeginTx(ctx, opts)
	if err != nil {
		return err
	}
	defer s.rollback(ctx, tx)
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// rollback rolls tx back unless it was committed (then it does nothing),
// within cleanupContext: deferred after Begin.
func (s *Store) rollback(ctx context.Context, tx pgx.Tx) {
	cctx, cancel := s.cleanupContext(ctx)
	defer cancel()
	tx.Rollback(cctx) //nolint:errcheck // on failure pgx closes the connection
}

// Role is the PostgreSQL role the store logs in as: the sidecar's
// identity for grants.
func (s *Store) Role() string { return s.pool.Config().ConnConfig.User }

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
