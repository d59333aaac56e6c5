package sidecar

import (
	"context"
	"time"

	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/store"
	"github.com/queenside/queenside/sidecar/telemetry"
)

func (s *Server) opPop(ctx context.Context, raw []byte) (any, error) {
	a, err := protocol.DecodePopArgs(raw)
	if err != nil {
		return nil, err
	}
	res, err := s.pop(ctx, a, nil)
	if err != nil {
		return nil, err
	}
	return res, nil
}

// pop serves a pop: a look at once, then, while nothing comes, the wait
// of a long-poll. first, when given, makes the look at once instead of the
// pop hub (an ack carrying the pop makes it in its own transaction); its
// caller found the queue's consumption not paused.
func (s *Server) pop(ctx context.Context, a protocol.PopArgs, first func(store.PopRequest) (protocol.PopResult, error)) (protocol.PopResult, error) {
	req := store.PopRequest{
		Queue: a.Queue, Partition: a.Partition, Group: a.Group, Batch: a.Batch, Partitions: a.Partitions,
		LeaseSeconds: a.LeaseSeconds, AutoAck: a.AutoAck, Mode: a.SubscriptionMode, From: a.SubscriptionFrom,
	}
	until := time.Now()
	if !s.draining.Load() {
		until = waitUntil(ctx, time.Duration(a.WaitMs)*time.Millisecond)
	}
	ctx, span := telemetry.StartPop(ctx, a)
	if first == nil && !s.waitWhilePaused(ctx, a.Queue, until) {
		res := protocol.PopResult{Messages: []protocol.Message{}, Leases: []protocol.Lease{}, Paused: true}
		telemetry.EndPop(span, res, nil)
		return res, nil
	}
	// An auto-acked pop of a sealed queue is taken under a lease and acked
	// once its payloads are open: a message this sidecar cannot open stays
	// where it is, for a sidecar that can.
	sealedAutoAck := req.AutoAck && s.control.encrypted(a.Queue)
	if sealedAutoAck {
		req.AutoAck = false
	}
	var res protocol.PopResult
	var err error
	if first == nil {
		res, err = s.pops.pop(ctx, req, until)
	} else {
		res, err = s.pops.lookThenWait(ctx, req, until, first)
	}
	if err == nil {
		res, err = s.openPopped(ctx, res, sealedAutoAck)
	}
	telemetry.EndPop(span, res, err)
	return res, err
}

// openPopped opens the payloads of a pop's messages. When one cannot be
// opened, the pop's leases are released, which charges no retry: nothing
// was consumed, and the error says why. autoAck acks what was opened.
func (s *Server) openPopped(ctx context.Context, res protocol.PopResult, autoAck bool) (protocol.PopResult, error) {
	if perr := s.openMessages(res.Messages); perr != nil {
		s.releaseQuietly(res.Leases)
		return protocol.PopResult{}, perr
	}
	if !autoAck || len(res.Messages) == 0 {
		return res, nil
	}
	items := make([]protocol.AckItem, len(res.Messages))
	for i, m := range res.Messages {
		off := m.Offset
		items[i] = protocol.AckItem{LeaseID: m.LeaseID, Offset: &off, Status: protocol.AckCompleted}
	}
	actx, cancel := s.store.Bound(ctx)
	defer cancel()
	ar, err := s.ack(actx, items)
	if err != nil {
		s.releaseQuietly(res.Leases)
		return protocol.PopResult{}, err
	}
	for _, r := range ar.Results {
		if !r.Success {
			s.releaseQuietly(res.Leases)
			return protocol.PopResult{}, protocol.Errorf(protocol.CodeUnavailable, "the auto-ack of a sealed queue's messages did not commit (%s): nothing was consumed", r.Code)
		}
	}
	for i := range res.Messages {
		res.Messages[i].LeaseID = ""
	}
	res.Leases = []protocol.Lease{}
	return res, nil
}

// waitUntil is when a long-poll answers empty: after wait, but before the
// request's own deadline so the answer is an empty result, not an error.
func waitUntil(ctx context.Context, wait time.Duration) time.Time {
	until := time.Now().Add(wait)
	if dl, ok := ctx.Deadline(); ok {
		margin := min(time.Until(dl)/10, 100*time.Millisecond)
		if end := dl.Add(-margin); end.Before(until) {
			until = end
		}
	}
	return until
}

func (s *Server) releaseQuietly(leases []protocol.Lease) {
	ids := make([]string, len(leases))
	for i, l := range leases {
		ids[i] = l.LeaseID
	}
	ctx, cancel := s.store.Bound(s.baseCtx)
	defer cancel()
	if _, err := s.store.Release(ctx, ids); err != nil {
		s.log.Warn("could not release the leases of a departed client; they will expire", "error", err)
	}
}

func (s *Server) opAck(ctx context.Context, raw []byte) (any, error) {
	a, err := protocol.DecodeAckArgs(raw)
	if err != nil {
		return nil, err
	}
	if a.Pop != nil {
		return s.ackAndPop(ctx, a.Items, *a.Pop)
	}
	ctx, cancel := s.store.Bound(ctx)
	defer cancel()
	ctx, span := telemetry.StartAck(ctx, a.Items)
	res, err := s.ack(ctx, a.Items)
	telemetry.EndAck(span, res, err)
	return res, err
}

// ackAndPop applies an ack call and serves the pop it carries, the look at
// once in the ack's transaction (revision 1.2). The acks are applied as
// any ack's, even if the client hangs up; a long-poll that follows waits
// only while the client is there. A database out of reach fails the whole
// call with unavailable: nothing was done. A pop that fails once the acks
// are applied is reported in the result's popError.
func (s *Server) ackAndPop(ctx context.Context, items []protocol.AckItem, a protocol.PopArgs) (protocol.AckResult, error) {
	popCtx, cancel := whileConnected(ctx)
	defer cancel()
	// The acks, and the pop's first look made with them, are bounded by
	// the database timeout; a long-poll that follows is not.
	ctx, cancelAck := s.store.Bound(ctx)
	defer cancelAck()
	ctx, span := telemetry.StartAck(ctx, items)
	var res protocol.AckResult
	var ackErr error
	var popped protocol.PopResult
	var popErr error
	if s.control.popPaused(a.Queue) { // the acks now, the pop then waits while paused
		if res, ackErr = s.ack(ctx, items); ackErr == nil {
			popped, popErr = s.pop(popCtx, a, nil)
		}
	} else {
		popped, popErr = s.pop(popCtx, a, func(req store.PopRequest) (protocol.PopResult, error) {
			var popped protocol.PopResult
			var popErr error
			res, popped, popErr, ackErr = s.store.AckPop(ctx, items, req, s.opts.MaxFrameBytes)
			if ackErr != nil {
				return protocol.PopResult{}, ackErr
			}
			return popped, popErr
		})
	}
	if ackErr != nil {
		telemetry.EndAck(span, res, ackErr)
		return protocol.AckResult{}, s.toProtocolError(ackErr)
	}
	if popErr != nil {
		pe := s.toProtocolError(popErr)
		res.PopError = pe
		popped = emptyPop()
	}
	res.Pop = &popped
	telemetry.EndAck(span, res, nil)
	return res, nil
}

func (s *Server) ack(ctx context.Context, items []protocol.AckItem) (protocol.AckResult, error) {
	res, err := s.store.Ack(ctx, items)
	if store.IsUnavailable(err) && (ctx.Err() == nil || store.AsTimeout(err) != nil) {
		// One transaction: nothing moved, and every item says why.
		s.suspectDatabase(err)
		res = protocol.AckResult{Results: make([]protocol.AckItemResult, len(items)), Leases: []protocol.LeaseState{}}
		for i := range res.Results {
			res.Results[i] = protocol.AckItemResult{Index: i, Code: string(protocol.CodeUnavailable)}
		}
		return res, nil
	}
	return res, err
}

func (s *Server) opRenew(ctx context.Context, raw []byte) (any, error) {
	a, err := protocol.DecodeLeaseIDsArgs(raw)
	if err != nil {
		return nil, err
	}
	res, err := s.store.Renew(ctx, a.LeaseIDs, a.Seconds)
	return protocol.LeaseResults{Results: res}, err
}

func (s *Server) opRelease(ctx context.Context, raw []byte) (any, error) {
	a, err := protocol.DecodeLeaseIDsArgs(raw)
	if err != nil {
		return nil, err
	}
	res, err := s.store.Release(ctx, a.LeaseIDs)
	return protocol.LeaseResults{Results: res}, err
}
