package sidecar

import (
	"context"
	"time"

	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/store"
)

// opFunc serves one operation: it decodes its own arguments and returns a
// result to encode, or an error.
type opFunc func(ctx context.Context, args []byte) (any, error)

type opSpec struct {
	fn opFunc
	// waits marks an operation that may wait for events (a long-poll pop):
	// it ends when its client goes away. Others run to completion even if
	// the client hangs up, so nothing half-done is left behind.
	waits bool
	// local marks an operation that needs no migrated schema.
	local bool
	// duringDrain marks an operation still served while draining, so that
	// probes can see the drain.
	duringDrain bool
	// connAware marks an operation that runs to completion but has a part
	// that only matters while its client is there (whileConnected).
	connAware bool
}

// bounded tells whether the whole operation is bounded by the database
// timeout. One that may wait (a long-poll) bounds each of its database
// calls instead, so that it still answers when its wait ends.
func (spec opSpec) bounded() bool { return !spec.waits && !spec.connAware }

func (s *Server) operations() map[string]opSpec {
	return map[string]opSpec{
		protocol.OpHello:       {fn: s.opHello, local: true},
		protocol.OpHealth:      {fn: s.opHealth, local: true, duringDrain: true},
		protocol.OpPush:        {fn: s.opPush, local: true}, // waits for the schema itself, or spools
		protocol.OpConfigure:   {fn: s.opConfigure},
		protocol.OpQueues:      {fn: s.opQueues},
		protocol.OpStats:       {fn: s.opStats},
		protocol.OpPop:         {fn: s.opPop, waits: true},
		protocol.OpAck:         {fn: s.opAck, connAware: true}, // an ack carrying a pop waits only while connected
		protocol.OpRenew:       {fn: s.opRenew},
		protocol.OpRelease:     {fn: s.opRelease},
		protocol.OpGroups:      {fn: s.opGroups},
		protocol.OpSeek:        {fn: s.opSeek},
		protocol.OpDeleteGroup: {fn: s.opDeleteGroup},
		protocol.OpDLQ:         {fn: s.opDLQ},
		protocol.OpDLQReplay:   {fn: s.opDLQReplay},
		protocol.OpTransaction: {fn: s.opTransaction},
		protocol.OpMaintenance: {fn: s.opMaintenance},
		protocol.OpDLQDelete:   {fn: s.opDLQDelete},
		protocol.OpDLQSummary:  {fn: s.opDLQSummary},
	}
}

// connKey holds, in a request's context, the context of its connection,
// which ends when the client goes.
type connKey struct{}

// whileConnected is ctx ending also when the request's client goes: for
// the part of a request that only matters while someone waits for it (the
// long-poll of an ack carrying a pop), when ctx itself outlives the client.
func whileConnected(ctx context.Context) (context.Context, context.CancelFunc) {
	conn, ok := ctx.Value(connKey{}).(context.Context)
	if !ok {
		return context.WithCancel(ctx)
	}
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(conn, cancel)
	return ctx, func() { stop(); cancel() }
}

func (s *Server) dispatch(connCtx context.Context, req protocol.Request) (any, error) {
	spec, ok := s.ops[req.Op]
	if !ok {
		return nil, protocol.Errorf(protocol.CodeUnknownOp, "no operation named %q", req.Op)
	}
	if s.draining.Load() && !spec.duringDrain {
		return nil, protocol.Errorf(protocol.CodeDraining, "the sidecar is shutting down; retry on another")
	}
	ctx := s.baseCtx
	if spec.waits {
		ctx = connCtx
	}
	if spec.connAware {
		ctx = context.WithValue(ctx, connKey{}, connCtx)
	}
	if req.TimeoutMs > protocol.MaxTimeoutMs {
		return nil, protocol.Errorf(protocol.CodeInvalidArgument, "timeoutMs %d is above %d (a day)", req.TimeoutMs, uint64(protocol.MaxTimeoutMs))
	}
	if req.TimeoutMs > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(req.TimeoutMs)*time.Millisecond)
		defer cancel()
	}
	if spec.bounded() {
		var cancel context.CancelFunc
		ctx, cancel = s.store.Bound(ctx)
		defer cancel()
	}
	if !spec.local {
		if err := s.awaitReady(ctx); err != nil {
			return nil, err
		}
	}
	res, err := spec.fn(ctx, req.Args)
	if err = store.TimedOut(ctx, err); err != nil && store.AsTimeout(err) == nil && ctx.Err() == context.DeadlineExceeded {
		return nil, protocol.Errorf(protocol.CodeDeadlineExceeded, "%s did not finish within %d ms", req.Op, req.TimeoutMs)
	}
	return res, err
}
