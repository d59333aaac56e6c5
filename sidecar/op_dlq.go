package sidecar

import (
	"context"

	"github.com/google/uuid"

	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/store"
)

func (s *Server) opDLQ(ctx context.Context, raw []byte) (any, error) {
	args, err := protocol.DecodeDLQArgs(raw)
	if err != nil {
		return nil, err
	}
	return s.dlq(ctx, args)
}

// dlq lists dead letters with their payloads opened.
func (s *Server) dlq(ctx context.Context, args protocol.DLQArgs) (protocol.DLQResult, error) {
	res, err := s.store.DLQ(ctx, args)
	if err != nil {
		return res, err
	}
	for i := range res.Entries {
		e := &res.Entries[i]
		plain, perr := s.openPayload(e.Payload, e.Queue, e.MessageID)
		if perr != nil {
			return protocol.DLQResult{}, perr
		}
		e.Payload = plain
	}
	return res, nil
}

// opDLQReplay pushes each entry's payload again into its partition, as a
// new message with a fresh transaction id: replaying twice makes two
// messages. Entries fail one by one; a replay that is never recorded on its
// entry (the database went away in between) is still a stored message.
func (s *Server) opDLQReplay(ctx context.Context, raw []byte) (any, error) {
	args, err := protocol.DecodeDLQReplayArgs(raw)
	if err != nil {
		return nil, err
	}
	reply := protocol.DLQReplayReply{Results: make([]protocol.DLQReplayResult, len(args.IDs))}
	for i, id := range args.IDs {
		reply.Results[i] = s.replayDeadLetter(ctx, id)
	}
	return reply, nil
}

func (s *Server) replayDeadLetter(ctx context.Context, id int64) protocol.DLQReplayResult {
	r := protocol.DLQReplayResult{ID: id, Status: protocol.StatusFailed}
	d, err := s.store.DeadLetter(ctx, id)
	if err != nil {
		r.Error = s.toProtocolError(err)
		return r
	}
	mid, err := uuid.NewV7()
	if err != nil {
		r.Error = protocol.Errorf(protocol.CodeInternal, "%v", err)
		return r
	}
	// The new message has an id of its own: a sealed payload is opened
	// and sealed again for it (or stored plain, if the queue no longer
	// encrypts).
	payload, perr := s.openPayload(d.Payload, d.Queue, d.MessageID.String())
	if perr != nil {
		r.Error = perr
		return r
	}
	m := store.Message{Queue: d.Queue, Partition: d.Partition, Payload: payload,
		TransactionID: uuid.NewString(), MessageID: mid, TraceID: d.TraceID, Headers: d.Headers}
	if perr := s.seal(&m); perr != nil {
		r.Error = perr
		return r
	}
	outcomes, err := s.store.Push(ctx, []store.Message{m})
	if err != nil {
		r.Error = s.toProtocolError(err)
		return r
	}
	o := outcomes[0]
	r.Status, r.MessageID, r.TransactionID = protocol.StatusQueued, o.MessageID.String(), m.TransactionID
	r.Offset, r.CommittedAt = &o.Offset, &o.CommittedAt
	if err := s.store.MarkDeadLetterReplayed(ctx, d, o.MessageID, m.TransactionID, o.Offset, o.CommittedAt); err != nil {
		s.log.Warn("a dead letter was replayed but the replay could not be recorded on it", "id", id, "error", err)
	}
	return r
}
