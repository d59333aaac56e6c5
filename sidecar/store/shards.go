package store

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/queenside/queenside/schema"
)

// Shards. On one PostgreSQL every partition is on one shard (0), and a
// call is one statement as it always was. On Citus (schema.Distribute) the
// per-partition tables are spread over shards by partition id, and a
// statement may lock rows of one shard only (SCALING.md, section 4, R2): a
// call over partitions of several shards is split into one call per shard,
// made in shard order inside one transaction, so that every transaction
// takes its partition and cursor locks in one global order, (shard,
// partition), and no two can deadlock across nodes.

// layout is what the store knows of where the schema lies.
type layout struct {
	mu     sync.Mutex
	known  bool
	citus  bool
	shards idCache[int64, int64] // partition id -> shard id, on Citus
	// partition id -> the worker its shard is placed on, "host:port" (a
	// shard placed on several, their names joined by commas), on Citus
	workers idCache[int64, string]
}

// onCitus tells whether the schema is distributed over Citus. It is asked
// once, at the first call that needs it: distributing the schema is a step
// taken before sidecars serve (queenside migrate --citus).
func (s *Store) onCitus(ctx context.Context) (bool, error) {
	s.layout.mu.Lock()
	defer s.layout.mu.Unlock()
	if !s.layout.known {
		citus, err := schema.IsDistributed(ctx, s.pool)
		if err != nil {
			return false, fmt.Errorf("where the schema lies: %w", err)
		}
		s.layout.known, s.layout.citus = true, citus
	}
	return s.layout.citus, nil
}

// routed tells whether calls are routed to their shard's worker (Citus),
// as far as known: the first call that needs the layout learns it.
func (s *Store) routed() bool {
	s.layout.mu.Lock()
	defer s.layout.mu.Unlock()
	return s.layout.known && s.layout.citus
}

// shardsOf returns the shard of each partition id, in order: all 0 on one
// PostgreSQL. A partition's shard is fixed when it is created and kept in
// memory, and so is the worker it lies on: a shard split since only
// makes calls span shards they were thought not to, which costs a
// two-phase commit, and a shard moved makes pushes fuse or wait as if it
// were on its old worker (hungWorkers), never an outcome.
func (s *Store) shardsOf(ctx context.Context, ids []int64) ([]int64, error) {
	out := make([]int64, len(ids))
	citus, err := s.onCitus(ctx)
	if err != nil || !citus {
		return out, err
	}
	var missing []int64
	for i, id := range ids {
		shard, ok := s.layout.shards.get(id)
		if !ok {
			missing = append(missing, id)
		}
		out[i] = shard
	}
	if len(missing) == 0 {
		return out, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT o_id, o_shard, o_workers FROM queenside.shards_of($1)`, missing)
	if err != nil {
		return nil, fmt.Errorf("shards of partitions: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, shard int64
		var worker string
		if err := rows.Scan(&id, &shard, &worker); err != nil {
			return nil, fmt.Errorf("shards of partitions: %w", err)
		}
		s.layout.workers.put(id, worker)
		s.layout.shards.put(id, shard)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("shards of partitions: %w", err)
	}
	for i, id := range ids {
		out[i], _ = s.layout.shards.get(id)
	}
	return out, nil
}

// workersOf names the workers that the shards of pushShards lie on,
// sorted, each once (Citus; shardsOf learnt them).
func (s *Store) workersOf(ids []int64, shards [][]int) []string {
	var workers []string
	for _, positions := range shards {
		w, _ := s.layout.workers.get(ids[positions[0]])
		workers = append(workers, w)
	}
	slices.Sort(workers)
	return slices.Compact(workers)
}

// byShard groups the positions of shards (each element a position's
// shard) by shard, in shard order, each group's positions in their order.
func byShard(shards []int64) [][]int {
	order := make([]int, len(shards))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(shards[a], shards[b]) })
	var groups [][]int
	for k, i := range order {
		if k == 0 || shards[i] != shards[order[k-1]] {
			groups = append(groups, nil)
		}
		groups[len(groups)-1] = append(groups[len(groups)-1], i)
	}
	return groups
}
