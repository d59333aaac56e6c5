package pgserver

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// waitReady polls until a real connection succeeds. pg_ctl -w already waits
// for the postmaster to report readiness, but the contract of Start and
// Restart is "a client can connect now", so check exactly that.
func (s *Server) waitReady(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultWait)
		defer cancel()
	}
	var last error
	for {
		last = s.ping(ctx)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("server not accepting connections: %w (last attempt: %v)", ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (s *Server) ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.Ping(ctx)
}
