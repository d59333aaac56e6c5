package sidecar

import (
	"context"
	"errors"

	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/store"
	"github.com/queenside/queenside/sidecar/telemetry"
)

// opTransaction commits acks and pushes together, or nothing. It is never
// spooled: its point is atomicity with the acks, which only PostgreSQL can
// give, so while the database is unreachable it fails with unavailable.
func (s *Server) opTransaction(ctx context.Context, raw []byte) (any, error) {
	args, err := protocol.DecodeTransactionArgs(raw)
	if err != nil {
		return nil, err
	}
	if s.control.pushMaintenance() {
		// A transaction is never spooled: its acks and pushes commit together.
		return nil, protocol.Errorf(protocol.CodeUnavailable, "push maintenance is on: transactions wait until it ends")
	}
	ctx, span := telemetry.StartTransaction(ctx, args.Acks, args.Pushes)
	res, err := s.transaction(ctx, args)
	telemetry.End(span, err)
	if err != nil {
		return nil, err
	}
	return res, nil
}

func (s *Server) transaction(ctx context.Context, args protocol.TransactionArgs) (protocol.TransactionResult, error) {
	msgs := make([]store.Message, len(args.Pushes))
	for i := range args.Pushes {
		var err error
		if msgs[i], err = newMessage(&args.Pushes[i]); err != nil {
			return protocol.TransactionResult{}, protocol.Errorf(protocol.CodeInternal, "%v", err)
		}
		if perr := s.seal(&msgs[i]); perr != nil {
			return protocol.TransactionResult{}, perr
		}
	}
	ackRes, outcomes, err := s.store.Transaction(ctx, args.Acks, msgs)
	var conflict *store.ConflictError
	if errors.As(err, &conflict) {
		e := protocol.Errorf(protocol.CodeConflict, "%v", conflict)
		e.Details = map[string]any{"acks": conflict.Acks}
		return protocol.TransactionResult{}, e
	}
	if err != nil {
		return protocol.TransactionResult{}, err
	}
	res := protocol.TransactionResult{Acks: ackRes.Results, Pushes: make([]protocol.PushResult, len(msgs))}
	positions := make([]int, len(msgs))
	for i, m := range msgs {
		positions[i] = i
		res.Pushes[i] = protocol.PushResult{Index: i, Queue: m.Queue, Partition: m.Partition, TransactionID: m.TransactionID}
	}
	fillOutcomes(res.Pushes, positions, outcomes)
	return res, nil
}
