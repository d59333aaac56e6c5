package store

import (
	"context"
	"fmt"
	"sync"
)

// partitionKey names a partition by its queue and its own name.
type partitionKey struct{ queue, partition string }

// partitionCache remembers partition ids, which never change once created.
// It only saves a round trip: the push itself locks the row by id, so a
// stale entry can never decide anything.
type partitionCache struct {
	mu  sync.RWMutex
	ids map[partitionKey]int64
}

func newPartitionCache() partitionCache {
	return partitionCache{ids: make(map[partitionKey]int64)}
}

func (c *partitionCache) get(k partitionKey) (int64, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	id, ok := c.ids[k]
	return id, ok
}

func (c *partitionCache) put(k partitionKey, id int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ids[k] = id
}

func (c *partitionCache) forget(k partitionKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.ids, k)
}

// partitionID returns the id of a partition, creating it and its queue on
// first use.
func (s *Store) partitionID(ctx context.Context, k partitionKey) (int64, error) {
	if id, ok := s.parts.get(k); ok {
		return id, nil
	}
	var id int64
	err := s.pool.QueryRow(ctx, "SELECT queenside.ensure_partition($1, $2)", k.queue, k.partition).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("ensure partition %s/%s: %w", k.queue, k.partition, err)
	}
	s.parts.put(k, id)
	return id, nil
}
