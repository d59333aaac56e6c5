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
	ids, err := s.partitionIDs(ctx, []partitionKey{k})
	return ids[k], err
}

// partitionIDs returns the ids of partitions, creating the missing ones
// (and their queues) with one call per queue.
func (s *Store) partitionIDs(ctx context.Context, keys []partitionKey) (map[partitionKey]int64, error) {
	ids := make(map[partitionKey]int64, len(keys))
	missing := map[string][]string{} // queue -> partition names
	for _, k := range keys {
		if _, done := ids[k]; done {
			continue
		}
		if id, ok := s.parts.get(k); ok {
			ids[k] = id
			continue
		}
		ids[k] = 0
		missing[k.queue] = append(missing[k.queue], k.partition)
	}
	for queue, names := range missing {
		rows, err := s.pool.Query(ctx, "SELECT o_name, o_id FROM queenside.ensure_partitions($1, $2)", queue, names)
		if err != nil {
			return nil, fmt.Errorf("ensure partitions of %s: %w", queue, err)
		}
		for rows.Next() {
			var k partitionKey
			var id int64
			if err := rows.Scan(&k.partition, &id); err != nil {
				rows.Close()
				return nil, fmt.Errorf("ensure partitions of %s: %w", queue, err)
			}
			k.queue = queue
			ids[k] = id
			s.parts.put(k, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("ensure partitions of %s: %w", queue, err)
		}
	}
	return ids, nil
}
