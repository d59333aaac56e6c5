package store

import (
	"context"
	"fmt"
	"time"
)

// groupKey names a consumer group; group "" is the queue's shared group.
type groupKey struct{ queue, group string }

type groupIDs struct{ group, queue int64 }

// groupID returns a group's id, creating the group (with the given
// subscription, or the one its first pop recorded before the queue
// existed) on first use; ErrQueueNotFound while the queue does not exist
// (queenside.join_group).
func (s *Store) groupID(ctx context.Context, k groupKey, mode string, from *time.Time) (groupIDs, error) {
	if v, ok := s.groups.get(k); ok {
		return v, nil
	}
	var group, queue *int64
	err := s.pool.QueryRow(ctx, "SELECT o_group, o_queue FROM queenside.join_group($1, $2, $3, $4)",
		k.queue, k.group, mode, from).Scan(&group, &queue)
	if err != nil {
		return groupIDs{}, fmt.Errorf("join group %s/%q: %w", k.queue, k.group, err)
	}
	if group == nil {
		return groupIDs{}, fmt.Errorf("%w: %s", ErrQueueNotFound, k.queue)
	}
	v := groupIDs{group: *group, queue: *queue}
	s.groups.put(k, v)
	return v, nil
}
