package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// WakeChannel is the PostgreSQL notification channel on which every push,
// rewind and release announces its queue (see queenside.wake).
const WakeChannel = "queenside_wake"

// Listen delivers the queue names announced on WakeChannel to onWake until
// ctx ends, on a connection of its own, reconnecting after failures.
// onConnect runs after each (re)connection: notifications sent while the
// connection was down are lost, so waiters must look again.
//
// With no listener (ListenNone) it returns at once: waiters then rely on
// their own periodic looks.
func (s *Store) Listen(ctx context.Context, onWake func(queue string), onConnect func()) {
	if s.listen == nil {
		s.log.Info("no notification listener (--listen-database-url none): waiting pops look for new messages every second")
		return
	}
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := s.listenOnce(ctx, onWake, onConnect)
		if ctx.Err() != nil {
			return
		}
		s.log.Warn("notification listener lost its connection; reconnecting", "error", err, "in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (s *Store) listenOnce(ctx context.Context, onWake func(string), onConnect func()) error {
	conn, err := pgx.ConnectConfig(ctx, s.listen.Copy())
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+WakeChannel); err != nil {
		return err
	}
	onConnect()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		onWake(n.Payload)
	}
}
