package store

import (
	"context"
	"sync"
	"time"
)

// Wake-ups of calls routed to a worker. On one PostgreSQL a push notifies
// WakeChannel in its own transaction (queenside.wake). On Citus a push is
// routed to its shard's worker, where no sidecar listens: the sidecar
// notifies instead, on the coordinator, once the push committed. The
// notifications of pushes that commit while one is being sent go together
// in the next, one statement: a push never waits for its wake-up, and the
// coordinator commits one notifying transaction at a time, not one a push.

// wakeTimeout bounds one notifying statement. A wake-up lost (the database
// out of reach) only delays waiting pops until they look again, within a
// second.
const wakeTimeout = 5 * time.Second

type wakeSender struct {
	mu     sync.Mutex
	queues map[string]struct{} // to notify
	kick   chan struct{}       // something was queued
}

func newWakeSender() *wakeSender {
	return &wakeSender{queues: map[string]struct{}{}, kick: make(chan struct{}, 1)}
}

// wakeRouted queues the wake-up of the queues of msgs, stored by a call
// routed to a worker; nothing on one PostgreSQL, where the call woke them.
func (s *Store) wakeRouted(msgs []Message) {
	if !s.routed() {
		return
	}
	w := s.wakes
	w.mu.Lock()
	for i := range msgs {
		w.queues[msgs[i].Queue] = struct{}{}
	}
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// sendWakes sends the queued wake-ups until ctx ends.
func (s *Store) sendWakes(ctx context.Context) {
	w := s.wakes
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
		}
		w.mu.Lock()
		queues := make([]string, 0, len(w.queues))
		for q := range w.queues {
			queues = append(queues, q)
		}
		clear(w.queues)
		w.mu.Unlock()
		sctx, cancel := context.WithTimeout(ctx, wakeTimeout)
		_, err := s.pool.Exec(sctx, "SELECT pg_notify($1, q) FROM unnest($2::text[]) AS q", WakeChannel, queues)
		cancel()
		if err != nil && ctx.Err() == nil {
			s.log.Debug("could not send wake-ups; waiting pops look again within a second", "queues", len(queues), "error", err)
		}
	}
}
