package sidecar

import (
	"context"
	"net/http"
)

// apiDatabase is the database's health from the queues' point of view:
// table sizes and dead tuples, what holds back vacuum, connections and
// replication, with each problem in a sentence (store.DatabaseHealth).
func (s *Server) apiDatabase(ctx context.Context, _ *http.Request) (any, error) {
	return s.store.DatabaseHealth(ctx)
}
