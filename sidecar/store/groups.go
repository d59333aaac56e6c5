package store

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// groupKey names a consumer group; group "" is the queue's shared group.
type groupKey struct{ queue, group string }

type groupIDs struct{ group, queue int64 }

// groupCache remembers group ids. Like partitionCache it only saves a round
// trip: pop fails with no_data_found on a stale id, and the cache is dropped.
type groupCache struct {
	mu  sync.RWMutex
	ids map[groupKey]groupIDs
}

func (c *groupCache) get(k groupKey) (groupIDs, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	v, ok := c.ids[k]
	return v, ok
}

func (c *groupCache) put(k groupKey, v groupIDs) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ids == nil {
		c.ids = make(map[groupKey]groupIDs)
	}
	c.ids[k] = v
}

func (c *groupCache) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ids = nil
}

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
