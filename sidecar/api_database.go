package sidecar

import (
	"context"
	"net/http"
)

// apiDatabase is the database's health from the queues' point of view:
// table sizes and dead tuples, what holds back vacuum, connections and
// replication, with each problem in a sentence (store.DatabaseHealth).
// The statement of the oldest transaction, another session's SQL with its
// literals (a password in an ALTER ROLE, say), is shown only to tokens
// that may manage every queue (admin tokens without a narrower scope).
func (s *Server) apiDatabase(ctx context.Context, r *http.Request) (any, error) {
	h, err := s.store.DatabaseHealth(ctx)
	if err != nil {
		return nil, err
	}
	if t := h.OldestTransaction; t != nil && t.Query != "" {
		if !s.opts.Tokens.access(r).scope.mayEvery(rightManage) {
			t.Query, t.QueryHidden = "", true
		}
	}
	return h, nil
}
