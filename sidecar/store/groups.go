package store

import (
	"context"
	"fmt"
	"time"
)

// groupKey names a consumer group; group "" is the queue's shared group.
type groupKey struct{ queue, group string }

type groupIDs struct{ group, queue int64 }

// groupID returns a group's id, creating the queue and the group (with the
// given subscription) on first use.
func (s *Store) groupID(ctx context.Context, k groupKey, mode string, from *time.Time) (groupIDs, error) {
	if v, ok := s.groups.get(k); ok {
		return v, nil
	}
	var v groupIDs
	err := s.pool.QueryRow(ctx, "SELECT o_group, o_queue FROM queenside.ensure_group($1, $2, $3, $4)",
		k.queue, k.group, mode, from).Scan(&v.group, &v.queue)
	if err != nil {
		return v, fmt.Errorf("ensure group %s/%q: %w", k.queue, k.group, err)
	}
	s.groups.put(k, v)
	return v, nil
}
