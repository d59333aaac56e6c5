package sidecar

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/buffer"
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
		s.spool(ctx, msgs, positions, results, protocol.SpoolCauseMaintenance)
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
	cause := ""
	if len(direct) > 0 {
		dm, dp := pick(msgs, direct), pick(positions, direct)
		// A push still unanswered after a fifth of the database timeout
		// has the replayer check that PostgreSQL answers at all: in a stall,
		// the pushes that follow then go to the spool at once.
		suspect := time.AfterFunc(s.store.Timeout()/5, s.buffer.Suspect)
		outcomes, err := s.store.Push(ctx, dm)
		suspect.Stop()
		switch {
		case err == nil:
			fillOutcomes(results, dp, outcomes)
		case store.AsTimeout(err) == nil && ctx.Err() != nil:
			return protocol.PushReply{}, err // the request's own deadline (answered deadline_exceeded)
		case store.IsUnavailable(err):
			cause = buffer.CauseOf(err)
			if cause == protocol.SpoolCauseTimeout {
				s.buffer.Suspect()
			} else {
				s.buffer.MarkDown(err)
			}
			s.log.Warn("database unavailable; spooling the push", "items", len(dm), "cause", cause, "error", err)
			keep := s.unknownOutcome(err, dm, dp, results)
			// In request order, so each partition keeps its items' order.
			spooled = append(spooled, pick(direct, keep)...)
			slices.Sort(spooled)
		case store.IsForbidden(err):
			s.pushEachQueue(ctx, dm, dp, results, err)
		default:
			s.failAll(results, dp, s.toProtocolError(err))
		}
	}
	if len(spooled) > 0 {
		if cause == "" {
			cause = s.spoolCause()
		}
		s.spool(ctx, pick(msgs, spooled), pick(positions, spooled), results, cause)
	}
	return protocol.PushReply{Results: results}, nil
}

// unknownOutcome sorts the items of a push that failed for the database
// out of reach: it returns the indexes (into msgs) of those that may be
// spooled, and fails the others. A push that never reached the database,
// or whose connection failed before anything was sent, stored nothing:
// all of it may be spooled. One that was sent may have committed (its
// COMMIT went out, the answer never came): its replay is safe only in a
// queue that deduplicates, where a copy already stored makes the replay a
// duplicate. In a queue without deduplication the replay could store it
// twice, so such items fail with unavailable and the details say that the
// outcome is unknown: whether to push again is the application's choice.
func (s *Server) unknownOutcome(err error, msgs []store.Message, positions []int, results []protocol.PushResult) []int {
	keep := make([]int, 0, len(msgs))
	var connectErr *pgconn.ConnectError
	sent := !errors.Is(err, store.ErrNotSent) && !errors.As(err, &connectErr) && !pgconn.SafeToRetry(err)
	for j, m := range msgs {
		if !sent || s.deduplicates(m.Queue) {
			keep = append(keep, j)
			continue
		}
		e := protocol.Errorf(protocol.CodeUnavailable, "%v; the push was sent and may have been stored, "+
			"and queue %s does not deduplicate (dedupWindowSeconds 0), so it was not spooled: a replay could store it twice. "+
			"Pushing it again may store it twice", err, m.Queue)
		e.Details = map[string]any{"outcomeUnknown": true}
		results[positions[j]].Status, results[positions[j]].Error = protocol.StatusFailed, e
	}
	return keep
}

// pushToDatabase stores messages, answering each item queued or duplicate,
// or failed with the reason.
func (s *Server) pushToDatabase(ctx context.Context, msgs []store.Message, positions []int, results []protocol.PushResult) (protocol.PushReply, error) {
	outcomes, err := s.store.Push(ctx, msgs)
	if err != nil && store.AsTimeout(err) == nil && ctx.Err() != nil {
		return protocol.PushReply{}, err // the request's own deadline (answered deadline_exceeded)
	}
	switch {
	case store.IsForbidden(err):
		s.pushEachQueue(ctx, msgs, positions, results, err)
	case err != nil:
		s.failAll(results, positions, s.toProtocolError(err))
	default:
		fillOutcomes(results, positions, outcomes)
	}
	return protocol.PushReply{Results: results}, nil
}

// pushEachQueue answers a push PostgreSQL refused because the role may not
// produce to one of its queues: queue by queue, so that only the items of
// the queues refused fail (forbidden) and the others are stored, each
// queue's in one transaction.
func (s *Server) pushEachQueue(ctx context.Context, msgs []store.Message, positions []int, results []protocol.PushResult, refused error) {
	var queues []string
	byQueue := map[string][]int{}
	for j, m := range msgs {
		if _, ok := byQueue[m.Queue]; !ok {
			queues = append(queues, m.Queue)
		}
		byQueue[m.Queue] = append(byQueue[m.Queue], j)
	}
	if len(queues) == 1 {
		s.failAll(results, positions, s.toProtocolError(refused))
		return
	}
	for _, q := range queues {
		idx := byQueue[q]
		outcomes, err := s.store.Push(ctx, pick(msgs, idx))
		if err != nil {
			s.failAll(results, pick(positions, idx), s.toProtocolError(err))
			continue
		}
		fillOutcomes(results, pick(positions, idx), outcomes)
	}
}

// spool writes messages to the disk spool and answers them buffered once
// fsynced. A spool that is full or cannot write fails them: an item is
// answered buffered only when it is on disk. cause says why they are
// spooled, for the metrics.
func (s *Server) spool(ctx context.Context, msgs []store.Message, positions []int, results []protocol.PushResult, cause string) {
	_, span := telemetry.StartSpoolWrite(ctx, len(msgs))
	err := s.buffer.Add(msgs)
	telemetry.End(span, err)
	switch {
	case err == nil:
		s.metrics.spooled(cause, len(msgs))
		for j, i := range positions {
			r := &results[i]
			r.Status, r.MessageID, r.TransactionID = protocol.StatusBuffered, msgs[j].MessageID.String(), msgs[j].TransactionID
		}
	case errors.Is(err, spool.ErrFull):
		s.failAll(results, positions, protocol.Errorf(protocol.CodeSpoolFull,
			"%s, and the spool is at its byte limit: %v", whySpooled(cause), err))
	default:
		s.log.Error("spooling a push failed", "items", len(msgs), "error", err)
		s.failAll(results, positions, protocol.Errorf(protocol.CodeUnavailable,
			"%s, and the spool could not store the items: %v", whySpooled(cause), err))
	}
}

// whySpooled says, for an error, why items went to the spool.
func whySpooled(cause string) string {
	switch cause {
	case protocol.SpoolCauseBehind:
		return "earlier items of the partition wait in the spool, and the items must not overtake them"
	case protocol.SpoolCauseMaintenance:
		return "pushes are paused for maintenance"
	}
	return "PostgreSQL is unreachable"
}

// deduplicates tells whether queue deduplicates, as the last push through
// this sidecar found it, or else as the buffer last read it.
func (s *Server) deduplicates(queue string) bool {
	if on, known := s.store.Deduplicates(queue); known {
		return on
	}
	return s.buffer.Deduplicates(queue)
}

// spoolCause is why items that go straight to the spool do: the outage in
// course, the schema not ready yet (counted as refused: the database has
// not let the sidecar migrate), or the items spooled before them.
func (s *Server) spoolCause() string {
	if c := s.buffer.DownCause(); c != "" {
		return c
	}
	if !s.ready.Load() {
		return protocol.SpoolCauseRefused
	}
	return protocol.SpoolCauseBehind
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
