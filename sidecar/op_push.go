package sidecar

import (
	"context"
	"errors"
	"slices"

	"github.com/google/uuid"

	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/store"
	"github.com/queenside/queenside/sidecar/telemetry"
	"github.com/queenside/queenside/spool"
)

// opPush stores the valid items of a request in one transaction. Each item
// gets its messageId now, when the sidecar first receives it, and a random
// transactionId when it has none (such an item's retries are not
// deduplicated). A malformed item fails alone.
func (s *Server) opPush(ctx context.Context, raw []byte) (any, error) {
	args, err := protocol.DecodePushArgs(raw)
	if err != nil {
		return nil, err
	}
	ctx, span := telemetry.StartPush(ctx, args.Items)
	reply, err := s.push(ctx, args)
	telemetry.EndPush(span, reply.Results, err)
	if err != nil {
		return nil, err
	}
	return reply, nil
}

func (s *Server) push(ctx context.Context, args protocol.PushArgs) (protocol.PushReply, error) {
	results := make([]protocol.PushResult, len(args.Items))
	msgs := make([]store.Message, 0, len(args.Items))
	positions := make([]int, 0, len(args.Items))
	for i := range args.Items {
		it := &args.Items[i]
		r := &results[i]
		*r = protocol.PushResult{Index: i, Queue: it.Queue, Partition: it.Partition, TransactionID: it.TransactionID}
		if it.Invalid != nil {
			r.Status, r.Error = protocol.StatusFailed, it.Invalid
			continue
		}
		m, err := newMessage(it)
		if err != nil {
			r.Status, r.Error = protocol.StatusFailed, protocol.Errorf(protocol.CodeInternal, "%v", err)
			continue
		}
		if perr := s.seal(&m); perr != nil {
			r.Status, r.Error = protocol.StatusFailed, perr
			continue
		}
		r.TransactionID = m.TransactionID
		msgs = append(msgs, m)
		positions = append(positions, i)
	}
	if len(msgs) == 0 {
		return protocol.PushReply{Results: results}, nil
	}
	if s.control.pushMaintenance() {
		if s.buffer == nil {
			return protocol.PushReply{}, protocol.Errorf(protocol.CodeUnavailable,
				"push maintenance is on and this sidecar has no spool to hold the push")
		}
		s.spool(ctx, msgs, positions, results)
		return protocol.PushReply{Results: results}, nil
	}
	if s.buffer == nil {
		if err := s.awaitReady(ctx); err != nil {
			return protocol.PushReply{}, err
		}
		return s.pushToDatabase(ctx, msgs, positions, results)
	}
	// While the sidecar starts, a push waits for the schema as any request
	// does; one that is not ready in time is spooled, as is every push
	// while PostgreSQL is known to be unreachable.
	if !s.ready.Load() && !s.databaseDown() {
		_ = s.waitReady(ctx, pushReadyWait(ctx)) // not ready in time: spooled below
	}
	// Items go to the spool while PostgreSQL is known to be unreachable (or
	// not yet migrated), and while their partition has spooled items that
	// they must not overtake; the rest go to the database.
	var direct, spooled []int // indexes into msgs
	for j, m := range msgs {
		if !s.ready.Load() || s.buffer.ShouldSpool(m.Queue, m.Partition) {
			spooled = append(spooled, j)
		} else {
			direct = append(direct, j)
		}
	}
	if len(direct) > 0 {
		dm, dp := pick(msgs, direct), pick(positions, direct)
		outcomes, err := s.store.Push(ctx, dm)
		switch {
		case err != nil && ctx.Err() != nil:
			return protocol.PushReply{}, err // out of time (answered deadline_exceeded): nothing committed
		case err != nil && store.IsUnavailable(err):
			s.buffer.MarkDown()
			s.log.Warn("database unavailable; spooling the push", "items", len(dm), "error", err)
			// In request order, so each partition keeps its items' order.
			spooled = append(spooled, direct...)
			slices.Sort(spooled)
		case err != nil:
			s.failAll(results, dp, s.toProtocolError(err))
		default:
			fillOutcomes(results, dp, outcomes)
		}
	}
	if len(spooled) > 0 {
		s.spool(ctx, pick(msgs, spooled), pick(positions, spooled), results)
	}
	return protocol.PushReply{Results: results}, nil
}

// pushToDatabase stores messages, answering each item queued or duplicate,
// or failed with the reason.
func (s *Server) pushToDatabase(ctx context.Context, msgs []store.Message, positions []int, results []protocol.PushResult) (protocol.PushReply, error) {
	outcomes, err := s.store.Push(ctx, msgs)
	if err != nil && ctx.Err() != nil {
		return protocol.PushReply{}, err // out of time (answered deadline_exceeded): nothing committed
	}
	if err != nil {
		s.failAll(results, positions, s.toProtocolError(err))
	} else {
		fillOutcomes(results, positions, outcomes)
	}
	return protocol.PushReply{Results: results}, nil
}

// spool writes messages to the disk spool and answers them buffered once
// fsynced. A spool that is full or cannot write fails them: an item is
// answered buffered only when it is on disk.
func (s *Server) spool(ctx context.Context, msgs []store.Message, positions []int, results []protocol.PushResult) {
	_, span := telemetry.StartSpoolWrite(ctx, len(msgs))
	err := s.buffer.Add(msgs)
	telemetry.End(span, err)
	switch {
	case err == nil:
		for j, i := range positions {
			r := &results[i]
			r.Status, r.MessageID, r.TransactionID = protocol.StatusBuffered, msgs[j].MessageID.String(), msgs[j].TransactionID
		}
	case errors.Is(err, spool.ErrFull):
		s.failAll(results, positions, protocol.Errorf(protocol.CodeSpoolFull,
			"PostgreSQL is unreachable and the spool is at its byte limit: %v", err))
	default:
		s.log.Error("spooling a push failed", "items", len(msgs), "error", err)
		s.failAll(results, positions, protocol.Errorf(protocol.CodeUnavailable,
			"PostgreSQL is unreachable and the spool could not store the items: %v", err))
	}
}

func (s *Server) failAll(results []protocol.PushResult, positions []int, perr *protocol.Error) {
	for _, i := range positions {
		results[i].Status, results[i].Error = protocol.StatusFailed, perr
	}
}

func fillOutcomes(results []protocol.PushResult, positions []int, outcomes []store.Outcome) {
	for j, i := range positions {
		o := outcomes[j]
		r := &results[i]
		r.Status = protocol.StatusQueued
		if o.Duplicate {
			r.Status = protocol.StatusDuplicate
		}
		off := o.Offset
		r.MessageID, r.Offset, r.CommittedAt = o.MessageID.String(), &off, o.CommittedAt
	}
}

// pick returns the elements of xs at the given indexes, in order.
func pick[T any](xs []T, idx []int) []T {
	if len(idx) == len(xs) {
		return xs // all of them, in order: no copy
	}
	out := make([]T, len(idx))
	for k, j := range idx {
		out[k] = xs[j]
	}
	return out
}

func newMessage(it *protocol.PushItem) (store.Message, error) {
	mid, err := uuid.NewV7()
	if err != nil {
		return store.Message{}, err
	}
	txid := it.TransactionID
	if txid == "" {
		txid = uuid.NewString()
	}
	var headers []byte
	if len(it.Headers) > 0 {
		if headers, err = protocol.Marshal(it.Headers); err != nil {
			return store.Message{}, err
		}
	}
	return store.Message{
		Queue:         it.Queue,
		Partition:     it.Partition,
		Payload:       it.Payload,
		TransactionID: txid,
		MessageID:     mid,
		TraceID:       it.TraceID,
		Headers:       headers,
	}, nil
}
