package sidecar

import (
	"context"
	"time"

	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/store"
)

// readyWait bounds how long a request without a timeoutMs waits for the
// schema when it arrives while the sidecar starts: an app that configures
// its queue right after connecting is served once the migrations are done
// (tens of milliseconds usually), instead of being refused.
const readyWait = 5 * time.Second

// SetReady marks the schema as migrated: operations that need the database
// are served from now on, and the requests waiting for it go on.
func (s *Server) SetReady() {
	s.readyOnce.Do(func() {
		s.ready.Store(true)
		close(s.readyCh)
	})
	s.control.nudge()
}

// Ready reports whether the schema is migrated.
func (s *Server) Ready() bool { return s.ready.Load() }

// noteStartupError records why the last attempt to migrate failed (nil:
// it did not fail), for the requests that wait meanwhile.
func (s *Server) noteStartupError(err error) {
	if err == nil {
		s.startupErr.Store(nil)
		return
	}
	s.startupErr.Store(&err)
	if s.buffer != nil && store.IsUnavailable(err) {
		s.buffer.MarkDown(err) // pushes go to the spool meanwhile, as in any outage
	}
}

// pushReadyWait is how long a push that comes while the sidecar starts
// waits for the schema before it is spooled: readyWait, or half of what
// its deadline leaves, so that spooling it still fits.
func pushReadyWait(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return min(readyWait, time.Until(d)/2)
	}
	return readyWait
}

// databaseDown tells whether the last attempt to migrate found PostgreSQL
// unreachable: then waiting for the schema is waiting for the outage.
func (s *Server) databaseDown() bool {
	p := s.startupErr.Load()
	return p != nil && store.IsUnavailable(*p)
}

// awaitReady returns nil once the schema is migrated. A request that comes
// before waits for it until its own deadline or readyWait, whichever is
// first; then, or at once while PostgreSQL is known to be unreachable, it
// is answered unavailable (retryable: nothing was done). A drain ends the
// wait with draining.
func (s *Server) awaitReady(ctx context.Context) error {
	return s.waitReady(ctx, readyWait)
}

// waitReady is awaitReady waiting at most bound.
func (s *Server) waitReady(ctx context.Context, bound time.Duration) error {
	if s.ready.Load() {
		return nil
	}
	if !s.databaseDown() {
		wait := bound
		if d, ok := ctx.Deadline(); ok {
			wait = min(wait, time.Until(d))
		}
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-s.readyCh:
			return nil
		case <-s.drained:
			return protocol.Errorf(protocol.CodeDraining, "the sidecar is shutting down; retry on another")
		case <-ctx.Done():
		case <-t.C:
		}
	}
	if p := s.startupErr.Load(); p != nil {
		return protocol.Errorf(protocol.CodeUnavailable, "the database schema is not ready yet: %v", *p)
	}
	return protocol.Errorf(protocol.CodeUnavailable, "the database schema is not ready yet: still migrating")
}
