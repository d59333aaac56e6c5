package sidecar

import (
	"context"
	"errors"

	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/store"
)

// toProtocolError turns any error an operation returned into the error the
// client sees. Errors that are not the caller's are logged: they are bugs
// or outages an operator should know of.
func (s *Server) toProtocolError(err error) *protocol.Error {
	var pe *protocol.Error
	switch {
	case errors.As(err, &pe):
		return pe
	case store.AsTimeout(err) != nil:
		s.suspectDatabase(err)
		return protocol.Errorf(protocol.CodeUnavailable, "database unavailable: %v", store.AsTimeout(err))
	case errors.Is(err, context.DeadlineExceeded):
		return protocol.Errorf(protocol.CodeDeadlineExceeded, "%v", err)
	case errors.Is(err, context.Canceled):
		// The client hung up (or the sidecar is closing): no one will read
		// this answer, and it is no failure of ours.
		return protocol.Errorf(protocol.CodeUnavailable, "request canceled")
	case errors.Is(err, store.ErrQueueNotFound), errors.Is(err, store.ErrPartitionNotFound):
		return protocol.Errorf(protocol.CodeNotFound, "%v", err)
	case errors.Is(err, store.ErrMessageTooLarge):
		return protocol.Errorf(protocol.CodeOverloaded, "%v; raise --max-frame-bytes", err)
	case store.IsUnavailable(err):
		s.suspectDatabase(err)
		return protocol.Errorf(protocol.CodeUnavailable, "database unavailable: %v", err)
	case store.IsForbidden(err):
		r, _ := store.AsRefusal(err)
		s.refused(r)
		return protocol.Errorf(protocol.CodeForbidden, "%s", r.Message)
	case store.IsPermissionDenied(err):
		s.log.Error("the database role may not do what a request needs", "error", err)
		return protocol.Errorf(protocol.CodePermissionDenied, "the sidecar's database role lacks a privilege: %v", err)
	}
	s.log.Error("request failed", "error", err)
	return protocol.Errorf(protocol.CodeInternal, "%v", err)
}

// suspectDatabase logs a call that found the database out of reach, and
// has the spool's replayer check at once whether it answers: if not, the
// pushes that follow go straight to the spool instead of each waiting out
// the database timeout.
func (s *Server) suspectDatabase(err error) {
	s.log.Warn("database unavailable", "error", err)
	if s.buffer != nil {
		s.buffer.Suspect()
	}
}
