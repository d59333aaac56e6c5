package sidecar

import (
	"context"

	"github.com/queenside/queenside/protocol"
)

func (s *Server) opGroups(ctx context.Context, raw []byte) (any, error) {
	args, err := protocol.DecodeGroupsArgs(raw)
	if err != nil {
		return nil, err
	}
	return s.store.Groups(ctx, args.Queue)
}

func (s *Server) opSeek(ctx context.Context, raw []byte) (any, error) {
	args, err := protocol.DecodeSeekArgs(raw)
	if err != nil {
		return nil, err
	}
	return s.store.Seek(ctx, args)
}

func (s *Server) opDeleteGroup(ctx context.Context, raw []byte) (any, error) {
	args, err := protocol.DecodeGroupArgs(raw)
	if err != nil {
		return nil, err
	}
	deleted, err := s.store.DeleteGroup(ctx, args.Queue, args.Group)
	if err != nil {
		return nil, err
	}
	return protocol.DeleteGroupResult{Deleted: deleted}, nil
}
