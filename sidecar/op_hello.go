package sidecar

import (
	"context"

	"github.com/queenside/queenside/protocol"
)

func (s *Server) opHello(_ context.Context, raw []byte) (any, error) {
	if _, err := protocol.DecodeHelloArgs(raw); err != nil {
		return nil, err
	}
	return protocol.HelloResult{
		Protocol:      protocol.Version,
		Server:        "queenside",
		Version:       Version,
		SidecarID:     s.id,
		MaxFrameBytes: s.opts.MaxFrameBytes,
	}, nil
}
