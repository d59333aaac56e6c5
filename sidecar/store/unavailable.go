package store

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// IsPermissionDenied reports whether PostgreSQL refused a statement for a
// privilege the role lacks (insufficient_privilege, 42501): no retry helps
// until it is granted. queenside's own refusals (IsForbidden) are among
// them.
func IsPermissionDenied(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42501"
}

// IsForbidden reports whether err is queenside's refusal of a right on a
// queue its role was not granted (queenside.refuse_unless: 42501 with its
// detail "queenside: right=R queue=Q", which PostgreSQL's own refusal of a
// privilege does not give).
func IsForbidden(err error) bool {
	_, ok := AsRefusal(err)
	return ok
}

// Refusal is queenside's refusal of a right on a queue (IsForbidden).
type Refusal struct {
	Right, Queue string
	// Message says who may not do what, and the grant that would allow it.
	Message string
}

// AsRefusal returns err's refusal, if it is one. The right and the queue
// are read from the detail, which, unlike the error's schema, column and
// table fields, Citus passes on from the worker a call ran on.
func AsRefusal(err error) (Refusal, bool) {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
		return Refusal{}, false
	}
	right, queue, ok := strings.Cut(strings.TrimPrefix(pgErr.Detail, refusalDetail), " queue=")
	if !ok || !strings.HasPrefix(pgErr.Detail, refusalDetail) {
		return Refusal{}, false
	}
	return Refusal{Right: right, Queue: queue, Message: pgErr.Message}, true
}

// refusalDetail begins the detail of queenside's refusals.
const refusalDetail = "queenside: right="

// IsUnavailable reports whether err means PostgreSQL could not be reached
// (refused, reset, shut down, or silent past the database timeout), as
// opposed to an error in what was asked. Only such failures may be retried
// elsewhere or spooled: replaying a data error would fail forever.
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	if AsTimeout(err) != nil {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// Class 08: connection exception. 57P01..57P03: the server is
		// shutting down, crashed, or not yet accepting connections.
		return strings.HasPrefix(pgErr.Code, "08") ||
			pgErr.Code == "57P01" || pgErr.Code == "57P02" || pgErr.Code == "57P03"
	}
	var connErr *pgconn.ConnectError
	var netErr net.Error
	return pgconn.SafeToRetry(err) ||
		errors.As(err, &connErr) ||
		errors.As(err, &netErr) ||
		errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, io.EOF)
}

// abortedToResolve tells whether PostgreSQL rolled a transaction back only
// to break a deadlock (40P01) or a serialization failure (40001): nothing
// of it was kept, and running it again is what it needs (a migration of
// another release taking its locks is where a sidecar may meet one).
func abortedToResolve(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40P01" || pgErr.Code == "40001")
}

// againIfAborted runs f, and again (three times at most, after a short
// pause) while PostgreSQL aborts it to resolve a conflict.
func againIfAborted(ctx context.Context, f func() error) error {
	err := f()
	for try := 1; try <= 3 && abortedToResolve(err) && ctx.Err() == nil; try++ {
		time.Sleep(time.Duration(try*10+rand.IntN(20)) * time.Millisecond)
		err = f()
	}
	return err
}
