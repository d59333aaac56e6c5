package store

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/queenside/queenside/protocol"
)

// Wake-ups of calls routed to a worker. On one PostgreSQL a push, and an
// ack that rewinds, notify WakeChannel in their own transaction
// (queenside.wake). On Citus they are routed to their shard's worker,
// where no sidecar listens: the sidecar notifies instead, on the
// coordinator, once the call committed. The notifications of calls that
// commit while one is being sent go together in the next, one statement: a
// call never waits for its wake-up, and the coordinator commits one
// notifying transaction at a time, not one a call.

type wakeSender struct {
	mu     sync.Mutex
	queues map[string]struct{} // to notify
	groups map[int64]struct{}  // whose queues to notify
	kick   chan struct{}       // something was queued
}

func newWakeSender() *wakeSender {
	return &wakeSender{queues: map[string]struct{}{}, groups: map[int64]struct{}{}, kick: make(chan struct{}, 1)}
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
	w.wake()
}

// wakeRewound queues the wake-up of the queues whose leases committed ack
// items rewound (an item failed, and succeeded), on Citus, where the call
// ran on a worker (or on the coordinator with p_route, which leaves the
// wake-up to its caller all the same); nothing on one PostgreSQL, where
// the call woke them.
func (s *Store) wakeRewound(items []protocol.AckItem, res protocol.AckResult) {
	if !s.routed() {
		return
	}
	w := s.wakes
	w.mu.Lock()
	woken := false
	for i, it := range items {
		if it.Status != protocol.AckFailed || i >= len(res.Results) || !res.Results[i].Success {
			continue
		}
		if ref, ok := parseLeaseID(it.LeaseID); ok {
			w.groups[ref.group] = struct{}{}
			woken = true
		}
	}
	w.mu.Unlock()
	if woken {
		w.wake()
	}
}

func (w *wakeSender) wake() {
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
		groups := make([]int64, 0, len(w.groups))
		for g := range w.groups {
			groups = append(groups, g)
		}
		clear(w.queues)
		clear(w.groups)
		w.mu.Unlock()
		// A wake-up lost (the database out of reach) only delays waiting
		// pops until they look again, within a second.
		sctx, cancel := s.Bound(ctx)
		err := s.notify(sctx, queues, groups)
		cancel()
		if err != nil && ctx.Err() == nil {
			s.log.Debug("could not send wake-ups; waiting pops look again within a second", "queues", len(queues), "error", err)
		}
	}
}

// notify sends a wake-up of each queue, and of the queue of each group.
// The names of the groups' queues are read first, apart: the notification
// is a statement on no table, which Citus runs where it is sent.
func (s *Store) notify(ctx context.Context, queues []string, groups []int64) error {
	if len(groups) > 0 {
		rows, err := s.pool.Query(ctx, `SELECT * FROM queenside.queues_of_groups($1)`, groups)
		if err != nil {
			return err
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		queues = append(queues, names...)
	}
	_, err := s.pool.Exec(ctx, "SELECT pg_notify($1, q) FROM unnest($2::text[]) AS q", WakeChannel, queues)
	return err
}
