package store

import "sync"

// idCache remembers the ids of rows that never change once created
// (partitions, groups). It only saves round trips: the SQL that uses an id
// locks its row and fails with no_data_found when it is gone, and the
// caller then resets the cache and looks again. No entry decides a verdict.
type idCache[K comparable, V any] struct {
	mu  sync.RWMutex
	ids map[K]V
}

func (c *idCache[K, V]) get(k K) (V, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	v, ok := c.ids[k]
	return v, ok
}

func (c *idCache[K, V]) put(k K, v V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ids == nil {
		c.ids = make(map[K]V)
	}
	c.ids[k] = v
}

func (c *idCache[K, V]) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ids = nil
}
