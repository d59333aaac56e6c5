package store

import (
	"context"
	"fmt"
	"time"
)

// DedupWindows returns the deduplication window of every queue the role
// touches. A window of 0 (dedup off) is included: replay cannot tell a
// copy that reached the database in such a queue at all.
func (s *Store) DedupWindows(ctx context.Context) (map[string]time.Duration, error) {
	rows, err := s.pool.Query(ctx, `SELECT * FROM queenside.dedup_windows()`)
	if err != nil {
		return nil, fmt.Errorf("dedup windows: %w", err)
	}
	defer rows.Close()
	out := make(map[string]time.Duration)
	for rows.Next() {
		var name string
		var secs int64
		if err := rows.Scan(&name, &secs); err != nil {
			return nil, fmt.Errorf("dedup windows: %w", err)
		}
		out[name] = time.Duration(secs) * time.Second
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("dedup windows: %w", err)
	}
	return out, nil
}
