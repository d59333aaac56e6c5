package store

import (
	"context"
	"time"
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
	lost := false
	connected := func() {
		if lost {
			s.log.Info("notification listener connected again")
			lost, backoff = false, 100*time.Millisecond
		}
		onConnect()
	}
	for ctx.Err() == nil {
		err := s.listenOnce(ctx, onWake, connected)
		lost = true
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

// listenOnce listens on one connection until it fails. A connection that
// stays silent is not taken for a quiet one: after a database timeout
// without a notification it must answer a round trip within another, or
// it is given up (a frozen server, or a partition that drops packets
// without a word, which TCP would report only much later): a silent
// listener is noticed within twice the database timeout.
func (s *Store) listenOnce(ctx context.Context, onWake func(string), onConnect func()) error {
	bctx, cancel := s.Bound(ctx)
	conn, err := s.connect(bctx, s.listen)
	if err == nil {
		_, err = conn.Exec(bctx, "LISTEN "+WakeChannel)
		if err != nil {
			closeQuietly(conn)
		}
	}
	cancel()
	if err != nil {
		return TimedOut(bctx, err)
	}
	defer closeQuietly(conn)
	onConnect()
	for {
		wctx, cancel := context.WithTimeout(ctx, s.timeout)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			onWake(n.Payload)
		case ctx.Err() != nil || wctx.Err() == nil || conn.IsClosed():
			return err
		default: // silent for a while: still there?
			pctx, cancel := s.Bound(ctx)
			_, err := conn.Exec(pctx, "SELECT 1")
			cancel()
			if err != nil {
				return TimedOut(pctx, err)
			}
		}
	}
}
