package bench

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// soakTables are the tables the soak watches: the messages and their
// hashes, which the janitor deletes from, the hashes it keeps of deleted
// messages, and the two tables every push and pop update in place.
var soakTables = []string{"segments", "dedup", "orphan_hashes", "cursors", "partitions"}

// TableSample is one table at one moment. Bytes are PostgreSQL's own
// measures: the heap, its indexes, and its TOAST table with that table's
// index. Tuples come from pg_stat_all_tables, which lags the truth by about
// a second; the TOAST table's dead tuples are counted apart.
type TableSample struct {
	TotalBytes      int64 `json:"totalBytes"` // heap + indexes + TOAST
	HeapBytes       int64 `json:"heapBytes"`
	IndexBytes      int64 `json:"indexBytes"`
	ToastBytes      int64 `json:"toastBytes"`
	LiveTuples      int64 `json:"liveTuples"`
	DeadTuples      int64 `json:"deadTuples"`
	ToastDeadTuples int64 `json:"toastDeadTuples"`
	Autovacuums     int64 `json:"autovacuums"` // so far, of the table and of its TOAST table
}

const tableStatsSQL = `
SELECT c.relname,
       pg_total_relation_size(c.oid), pg_relation_size(c.oid), pg_indexes_size(c.oid),
       coalesce(pg_total_relation_size(nullif(c.reltoastrelid, 0)), 0),
       coalesce(s.n_live_tup, 0), coalesce(s.n_dead_tup, 0), coalesce(ts.n_dead_tup, 0),
       coalesce(s.autovacuum_count, 0) + coalesce(ts.autovacuum_count, 0)
  FROM pg_class c
  JOIN pg_namespace n ON n.oid = c.relnamespace
  LEFT JOIN pg_stat_all_tables s ON s.relid = c.oid
  LEFT JOIN pg_stat_all_tables ts ON ts.relid = nullif(c.reltoastrelid, 0)
 WHERE n.nspname = 'queenside' AND c.relkind = 'r' AND c.relname = ANY ($1)`

// readTables samples the soak's tables.
func readTables(ctx context.Context, conn *pgx.Conn) (map[string]TableSample, error) {
	// Statistics are read once per transaction and cached in it; a fresh
	// snapshot each time is what a sample wants.
	if _, err := conn.Exec(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
		return nil, fmt.Errorf("table sizes: %w", err)
	}
	rows, err := conn.Query(ctx, tableStatsSQL, soakTables)
	if err != nil {
		return nil, fmt.Errorf("table sizes: %w", err)
	}
	defer rows.Close()
	out := make(map[string]TableSample, len(soakTables))
	for rows.Next() {
		var name string
		var t TableSample
		if err := rows.Scan(&name, &t.TotalBytes, &t.HeapBytes, &t.IndexBytes, &t.ToastBytes,
			&t.LiveTuples, &t.DeadTuples, &t.ToastDeadTuples, &t.Autovacuums); err != nil {
			return nil, fmt.Errorf("table sizes: %w", err)
		}
		out[name] = t
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("table sizes: %w", err)
	}
	if len(out) != len(soakTables) {
		return out, fmt.Errorf("table sizes: found %d of the tables %v: is the schema migrated?", len(out), soakTables)
	}
	return out, nil
}
