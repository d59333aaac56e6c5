package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/queenside/queenside/protocol"
)

// ControlPayload on WakeChannel says that the cluster's control state (the
// maintenance state, or a queue's consumptionPaused) changed. It cannot be a
// queue's name: "!" is not allowed in one.
const ControlPayload = "!control"

// Control is the cluster-wide state every sidecar applies: maintenance,
// the queues whose consumption is paused, and those whose payloads are
// sealed.
type Control struct {
	Maintenance protocol.MaintenanceState
	Paused      map[string]bool
	Encrypted   map[string]bool
}

// ReadControl reads the control state in one round trip.
func (s *Store) ReadControl(ctx context.Context) (Control, error) {
	c := Control{Paused: map[string]bool{}, Encrypted: map[string]bool{}}
	var paused, encrypted []string
	err := s.pool.QueryRow(ctx, `SELECT * FROM queenside.control_state()`).Scan(&c.Maintenance.Push, &c.Maintenance.Pop,
		&c.Maintenance.PushSince, &c.Maintenance.PopSince, &paused, &encrypted)
	if err != nil {
		return c, fmt.Errorf("read the control state: %w", err)
	}
	for _, q := range paused {
		c.Paused[q] = true
	}
	for _, q := range encrypted {
		c.Encrypted[q] = true
	}
	return c, nil
}

// SetMaintenance changes the maintenance state (a nil field keeps its
// value) and announces it to every sidecar in the same transaction. A
// state turned on keeps the time it was first turned on.
func (s *Store) SetMaintenance(ctx context.Context, push, pop *bool) (protocol.MaintenanceState, error) {
	var m protocol.MaintenanceState
	// queenside.set_maintenance checks manage on '*' (every queue), and
	// notifies in the update's transaction.
	err := s.pool.QueryRow(ctx, `SELECT o_push, o_pop, o_push_since, o_pop_since FROM queenside.set_maintenance($1, $2)`,
		push, pop).Scan(&m.Push, &m.Pop, &m.PushSince, &m.PopSince)
	if errors.Is(err, pgx.ErrNoRows) {
		return m, errors.New("set maintenance: the maintenance row is missing")
	}
	if err != nil {
		return m, fmt.Errorf("set maintenance: %w", err)
	}
	return m, nil
}
