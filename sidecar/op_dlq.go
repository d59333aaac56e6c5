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
	if err := s.openDeadLetters(res.Entries); err != nil {
		return protocol.DLQResult{}, err
	}
	return res, nil
}

// openDeadLetters opens the sealed payloads of entries in place.
func (s *Server) openDeadLetters(entries []protocol.DLQEntry) error {
	for i := range entries {
		e := &entries[i]
		plain, err := s.openPayload(e.Payload, e.Queue, e.MessageID)
		if err != nil {
			return err
		}
		e.Payload = plain
	}
	return nil
}

// opDLQReplay pushes each entry's payload again into its partition, as a
// new message with a fresh transaction id. Named by ids, every entry is
// replayed unless includeReplayed is false; by filter, one batch is, and
// entries replayed already are skipped unless includeReplayed is true.
// Each batch's pushes and their marks on the entries commit together.
func (s *Server) opDLQReplay(ctx context.Context, raw []byte) (any, error) {
	args, err := protocol.DecodeDLQReplayArgs(raw)
	if err != nil {
		return nil, err
	}
	return s.replayDeadLetters(ctx, args)
}

func (s *Server) replayDeadLetters(ctx context.Context, args protocol.DLQReplayArgs) (protocol.DLQReplayReply, error) {
	reply := protocol.DLQReplayReply{Results: []protocol.DLQReplayResult{}}
	dls, next, err := s.store.DeadLetters(ctx, args.DLQSelection)
	if err != nil {
		return reply, err
	}
	reply.NextAfterID = next
	again := args.ReplaysReplayed()
	byID := make(map[int64]int, len(dls)) // an entry's position in results
	var todo []store.DeadLetter
	var msgs []store.Message
	for _, d := range dls {
		byID[d.ID] = len(reply.Results)
		r := protocol.DLQReplayResult{ID: d.ID, Status: protocol.StatusFailed}
		if d.Replayed && !again {
			r.Status = protocol.StatusSkipped
		} else if m, perr := s.replayMessage(d); perr != nil {
			r.Error = perr
		} else {
			todo, msgs = append(todo, d), append(msgs, m)
		}
		reply.Results = append(reply.Results, r)
	}
	if len(todo) > 0 {
		outcomes, err := s.store.ReplayDeadLetters(ctx, todo, msgs, again)
		for k, d := range todo {
			r := &reply.Results[byID[d.ID]]
			switch {
			case err != nil:
				r.Error = s.toProtocolError(err)
			case outcomes[k] == nil: // replayed meanwhile by another
				r.Status = protocol.StatusSkipped
			default:
				o := outcomes[k]
				r.Status, r.MessageID, r.TransactionID = protocol.StatusQueued, o.MessageID.String(), msgs[k].TransactionID
				r.Offset, r.CommittedAt = &o.Offset, &o.CommittedAt
			}
		}
	}
	if !args.ByFilter() {
		reply.Results = inIDOrder(reply.Results, byID, args.IDs)
	}
	for _, r := range reply.Results {
		switch r.Status {
		case protocol.StatusQueued:
			reply.Replayed++
		case protocol.StatusSkipped:
			reply.Skipped++
		default:
			reply.Failed++
		}
	}
	return reply, nil
}

// inIDOrder answers named ids in their order, an id that names no entry
// failed with not_found.
func inIDOrder(found []protocol.DLQReplayResult, byID map[int64]int, ids []int64) []protocol.DLQReplayResult {
	out := make([]protocol.DLQReplayResult, len(ids))
	for i, id := range ids {
		if k, ok := byID[id]; ok {
			out[i] = found[k]
			continue
		}
		out[i] = protocol.DLQReplayResult{ID: id, Status: protocol.StatusFailed,
			Error: protocol.Errorf(protocol.CodeNotFound, "no dead letter with id %d", id)}
	}
	return out
}

// replayMessage is the new message that replays d. It has an id of its
// own: a sealed payload is opened and sealed again for it (or stored
// plain, if the queue no longer encrypts).
func (s *Server) replayMessage(d store.DeadLetter) (store.Message, *protocol.Error) {
	mid, err := uuid.NewV7()
	if err != nil {
		return store.Message{}, protocol.Errorf(protocol.CodeInternal, "%v", err)
	}
	payload, perr := s.openPayload(d.Payload, d.Queue, d.MessageID.String())
	if perr != nil {
		return store.Message{}, perr
	}
	m := store.Message{Queue: d.Queue, Partition: d.Partition, Payload: payload,
		TransactionID: uuid.NewString(), MessageID: mid, TraceID: d.TraceID, Headers: d.Headers}
	if perr := s.seal(&m); perr != nil {
		return store.Message{}, perr
	}
	return m, nil
}

// opDLQDelete deletes entries named by ids, or one batch of a filter.
func (s *Server) opDLQDelete(ctx context.Context, raw []byte) (any, error) {
	sel, err := protocol.DecodeDLQDeleteArgs(raw)
	if err != nil {
		return nil, err
	}
	deleted, next, err := s.store.DeleteDeadLetters(ctx, sel)
	if err != nil {
		return nil, err
	}
	return protocol.DLQDeleteReply{Deleted: deleted, NextAfterID: next}, nil
}

// opDLQSummary counts dead letters by queue, group and error.
func (s *Server) opDLQSummary(ctx context.Context, raw []byte) (any, error) {
	args, err := protocol.DecodeDLQSummaryArgs(raw)
	if err != nil {
		return nil, err
	}
	counts, err := s.store.DLQSummary(ctx, args)
	if err != nil {
		return nil, err
	}
	return protocol.DLQSummaryResult{Errors: counts}, nil
}
