package sidecar

import (
	"context"

	"github.com/queenside/queenside/protocol"
)

func (s *Server) opConfigure(ctx context.Context, raw []byte) (any, error) {
	args, err := protocol.DecodeConfigureArgs(raw)
	if err != nil {
		return nil, err
	}
	opts, err := s.store.Configure(ctx, args.Queue, args.Options)
	if err != nil {
		return nil, err
	}
	// A pause or resume applies here before the answer; elsewhere on the
	// notification.
	if err := s.refreshControl(ctx); err != nil {
		s.log.Warn("a queue was configured, but the control state could not be read back", "error", err)
	}
	return protocol.ConfigureResult{Queue: args.Queue, Options: opts}, nil
}

func (s *Server) opQueues(ctx context.Context, _ []byte) (any, error) {
	qs, err := s.store.Queues(ctx)
	if err != nil {
		return nil, err
	}
	return protocol.QueuesResult{Queues: qs}, nil
}

func (s *Server) opStats(ctx context.Context, raw []byte) (any, error) {
	args, err := protocol.DecodeQueueArgs(raw)
	if err != nil {
		return nil, err
	}
	return s.store.Stats(ctx, args.Queue)
}
