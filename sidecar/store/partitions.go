package store

import (
	"context"
	"fmt"
)

// partitionKey names a partition by its queue and its own name.
type partitionKey struct{ queue, partition string }

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
