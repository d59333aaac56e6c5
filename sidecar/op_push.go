package sidecar

import (
	"context"

	"github.com/google/uuid"

	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/store"
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
		r.TransactionID = m.TransactionID
		msgs = append(msgs, m)
		positions = append(positions, i)
	}
	if len(msgs) == 0 {
		return protocol.PushReply{Results: results}, nil
	}
	outcomes, err := s.store.Push(ctx, msgs)
	if err != nil && ctx.Err() != nil {
		return nil, err // out of time (answered deadline_exceeded): nothing committed
	}
	if err != nil {
		perr := s.toProtocolError(err)
		for _, i := range positions {
			results[i].Status, results[i].Error = protocol.StatusFailed, perr
		}
		return protocol.PushReply{Results: results}, nil
	}
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
	return protocol.PushReply{Results: results}, nil
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
