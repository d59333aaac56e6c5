package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queenside/queenside/protocol"
)

// What the dashboard reads. Every query here is bounded by partitions and
// cursors, never by messages: a queue's retained count is each partition's
// head offset less its first segment's base (one index probe a partition),
// so a million messages cost no more than one.

// QueueSummary is one queue as the dashboard lists it. Pushed and Consumed
// are counters: the dashboard's rates are their differences over time.
type QueueSummary struct {
	Queue      string                `json:"queue"`
	Partitions int64                 `json:"partitions"`
	Messages   int64                 `json:"messages"`
	Pushed     int64                 `json:"pushed"`   // every message stored: the sum of head offsets
	Consumed   int64                 `json:"consumed"` // the sum of every group's cursors
	Groups     int64                 `json:"groups"`
	Options    protocol.QueueOptions `json:"options"`
}

// GroupSummary is one group of a queue with its lag.
type GroupSummary struct {
	Group              string     `json:"group"`
	Lag                int64      `json:"lag"`
	Consumed           int64      `json:"consumed"`
	LeasedPartitions   int64      `json:"leasedPartitions"`
	OldestUnconsumedAt *time.Time `json:"oldestUnconsumedAt,omitempty"`
}

// PartitionSummary is one partition with every group's cursor and lease.
type PartitionSummary struct {
	Partition       string          `json:"partition"`
	HeadOffset      int64           `json:"headOffset"`
	Messages        int64           `json:"messages"`
	LastCommittedAt *time.Time      `json:"lastCommittedAt,omitempty"`
	Groups          []CursorSummary `json:"groups"`
}

// CursorSummary is a group's position and lease in one partition.
type CursorSummary struct {
	Group          string     `json:"group"`
	Cursor         int64      `json:"cursor"`
	Lag            int64      `json:"lag"`
	Leased         bool       `json:"leased"`
	LeaseExpiresAt *time.Time `json:"leaseExpiresAt,omitempty"`
}

// SidecarSession is one sidecar connected to the database now, as
// pg_stat_activity shows it by application name.
type SidecarSession struct {
	Name        string    `json:"name"`
	SidecarID   string    `json:"sidecarId,omitempty"`
	Connections int64     `json:"connections"`
	Since       time.Time `json:"since"`
	ClientAddrs []string  `json:"clientAddrs"`
}

// queueTotals sums a queue's partitions and cursors, from queueTotalsFrom.
const queueTotals = `
	coalesce(pt.n, 0), coalesce(pt.retained, 0), coalesce(pt.pushed, 0), coalesce(ct.consumed, 0),
	(SELECT count(*) FROM queenside.groups g WHERE g.queue_id = q.id)`

// queueTotalsFrom is the queues q that where (on q) names, with their
// partitions and cursors summed by queue apart and joined to them: on
// Citus a table read whole on every node (queues) may not be joined
// outward to one spread over shards.
func queueTotalsFrom(where string) string {
	return `
	FROM queenside.queues q
	LEFT JOIN (
		SELECT p.queue_id, count(*) AS n, sum(p.next_offset)::bigint AS pushed,
		       sum(p.next_offset - coalesce((SELECT sg.base_offset FROM queenside.segments sg
		                                      WHERE sg.partition_id = p.id
		                                      ORDER BY sg.last_offset LIMIT 1), p.next_offset))::bigint AS retained
		  FROM queenside.partitions p JOIN queenside.queues q ON q.id = p.queue_id ` + where + `
		 GROUP BY p.queue_id) pt ON pt.queue_id = q.id
	LEFT JOIN (
		SELECT g.queue_id, sum(coalesce(c.committed, 0))::bigint AS consumed
		  FROM queenside.cursors c JOIN queenside.groups g ON g.id = c.group_id
		  JOIN queenside.queues q ON q.id = g.queue_id ` + where + `
		 GROUP BY g.queue_id) ct ON ct.queue_id = q.id ` + where
}

// QueueSummaries lists every queue with its totals.
func (s *Store) QueueSummaries(ctx context.Context) ([]QueueSummary, error) {
	rows, err := s.pool.Query(ctx, `SELECT q.name, `+queueTotals+`, `+optionColumns+queueTotalsFrom("")+` ORDER BY q.name`)
	if err != nil {
		return nil, fmt.Errorf("queue summaries: %w", err)
	}
	defer rows.Close()
	out := []QueueSummary{}
	for rows.Next() {
		var q QueueSummary
		if err := rows.Scan(append([]any{&q.Queue, &q.Partitions, &q.Messages, &q.Pushed, &q.Consumed, &q.Groups},
			scanOptions(&q.Options)...)...); err != nil {
			return nil, fmt.Errorf("queue summaries: %w", err)
		}
		out = append(out, q)
	}
	return out, rows.Err()
}

// QueueSummary is one queue's totals and its groups.
func (s *Store) QueueSummary(ctx context.Context, queue string) (QueueSummary, []GroupSummary, error) {
	var q QueueSummary
	var queueID int64
	err := s.pool.QueryRow(ctx, `SELECT q.id, q.name, `+queueTotals+`, `+optionColumns+
		queueTotalsFrom("WHERE q.name = $1"), queue).
		Scan(append([]any{&queueID, &q.Queue, &q.Partitions, &q.Messages, &q.Pushed, &q.Consumed, &q.Groups},
			scanOptions(&q.Options)...)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return q, nil, fmt.Errorf("%w: %s", ErrQueueNotFound, queue)
	}
	if err != nil {
		return q, nil, fmt.Errorf("queue summary %s: %w", queue, err)
	}
	// Lag as in Groups: what the cursors have not passed, a cursor not
	// positioned yet counting from where its subscription starts.
	rows, err := s.pool.Query(ctx, `
		SELECT g.name, coalesce(l.lag, 0)::bigint, coalesce(l.consumed, 0)::bigint, coalesce(l.leased, 0), l.oldest
		  FROM queenside.groups g
		  LEFT JOIN (SELECT c.group_id, sum(greatest(p.next_offset - `+cursorPosition+`, 0)) AS lag,
		                    sum(c.committed) AS consumed,
		                    count(*) FILTER (WHERE c.lease_id IS NOT NULL AND c.lease_expires_at > now()) AS leased,
		                    min(c.head_at) FILTER (WHERE c.committed < p.next_offset) AS oldest
		               FROM queenside.cursors c
		               JOIN queenside.partitions p ON p.id = c.partition_id
		               JOIN queenside.groups g ON g.id = c.group_id
		              WHERE g.queue_id = $1
		              GROUP BY c.group_id) l ON l.group_id = g.id
		 WHERE g.queue_id = $1
		 ORDER BY g.name`, queueID)
	if err != nil {
		return q, nil, fmt.Errorf("queue summary %s: groups: %w", queue, err)
	}
	defer rows.Close()
	groups := []GroupSummary{}
	for rows.Next() {
		var g GroupSummary
		if err := rows.Scan(&g.Group, &g.Lag, &g.Consumed, &g.LeasedPartitions, &g.OldestUnconsumedAt); err != nil {
			return q, nil, fmt.Errorf("queue summary %s: groups: %w", queue, err)
		}
		groups = append(groups, g)
	}
	return q, groups, rows.Err()
}

// PartitionPage is up to limit partitions of a queue in name order, after
// the name after ("" from the first), whose names start with prefix. next
// is the after of the following page, "" on the last.
func (s *Store) PartitionPage(ctx context.Context, queue, after, prefix string, limit int) (page []PartitionSummary, next string, err error) {
	var queueID int64
	err = s.pool.QueryRow(ctx, "SELECT id FROM queenside.queues WHERE name = $1", queue).Scan(&queueID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, "", fmt.Errorf("%w: %s", ErrQueueNotFound, queue)
	}
	if err != nil {
		return nil, "", fmt.Errorf("partitions of %s: %w", queue, err)
	}
	// The (queue_id, name) index hands the names over in order, from
	// after on. One more row than asked says whether another page follows.
	rows, err := s.pool.Query(ctx, `
		SELECT p.id, p.name, p.next_offset,
		       p.next_offset - coalesce((SELECT sg.base_offset FROM queenside.segments sg
		                                  WHERE sg.partition_id = p.id
		                                  ORDER BY sg.last_offset LIMIT 1), p.next_offset),
		       p.last_committed_at
		  FROM queenside.partitions p
		 WHERE p.queue_id = $1 AND p.name > $2 AND starts_with(p.name, $3)
		 ORDER BY p.name LIMIT $4`, queueID, after, prefix, limit+1)
	if err != nil {
		return nil, "", fmt.Errorf("partitions of %s: %w", queue, err)
	}
	var ids []int64
	byID := map[int64]int{}
	page = []PartitionSummary{}
	for rows.Next() {
		var id int64
		p := PartitionSummary{Groups: []CursorSummary{}}
		if err := rows.Scan(&id, &p.Partition, &p.HeadOffset, &p.Messages, &p.LastCommittedAt); err != nil {
			rows.Close()
			return nil, "", fmt.Errorf("partitions of %s: %w", queue, err)
		}
		byID[id] = len(page)
		ids = append(ids, id)
		page = append(page, p)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("partitions of %s: %w", queue, err)
	}
	if len(page) > limit {
		delete(byID, ids[limit])
		ids, page = ids[:limit], page[:limit]
		next = page[limit-1].Partition
	}
	if len(ids) == 0 {
		return page, next, nil
	}
	rows, err = s.pool.Query(ctx, `
		SELECT c.partition_id, g.name, `+cursorPosition+`,
		       CASE WHEN c.lease_id IS NOT NULL AND c.lease_expires_at > now() THEN c.lease_expires_at END
		  FROM queenside.cursors c JOIN queenside.groups g ON g.id = c.group_id
		  JOIN queenside.partitions p ON p.id = c.partition_id
		 WHERE c.partition_id = ANY($1) AND p.id = ANY($1)
		 ORDER BY g.name`, ids)
	if err != nil {
		return nil, "", fmt.Errorf("partitions of %s: cursors: %w", queue, err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var c CursorSummary
		if err := rows.Scan(&id, &c.Group, &c.Cursor, &c.LeaseExpiresAt); err != nil {
			return nil, "", fmt.Errorf("partitions of %s: cursors: %w", queue, err)
		}
		p := &page[byID[id]]
		c.Leased = c.LeaseExpiresAt != nil
		// As stats counts it: a cursor behind retention skips what is gone.
		c.Lag = max(p.HeadOffset-max(c.Cursor, p.HeadOffset-p.Messages), 0)
		p.Groups = append(p.Groups, c)
	}
	return page, next, rows.Err()
}

// SidecarSessions lists the sidecars connected to this database now, by
// the application name each gives its sessions ("queenside/<sidecar id>").
func (s *Store) SidecarSessions(ctx context.Context) (serverVersion string, sidecars []SidecarSession, err error) {
	if err := s.pool.QueryRow(ctx, "SELECT current_setting('server_version')").Scan(&serverVersion); err != nil {
		return "", nil, fmt.Errorf("server version: %w", err)
	}
	rows, err := s.pool.Query(ctx, `
		SELECT application_name, count(*), min(backend_start),
		       array_agg(DISTINCT coalesce(host(client_addr), 'local'))
		  FROM pg_stat_activity
		 WHERE datname = current_database() AND application_name LIKE $1
		 GROUP BY application_name ORDER BY min(backend_start), application_name`, applicationName+"%")
	if err != nil {
		return serverVersion, nil, fmt.Errorf("sidecar sessions: %w", err)
	}
	defer rows.Close()
	sidecars = []SidecarSession{}
	for rows.Next() {
		var sc SidecarSession
		if err := rows.Scan(&sc.Name, &sc.Connections, &sc.Since, &sc.ClientAddrs); err != nil {
			return serverVersion, nil, fmt.Errorf("sidecar sessions: %w", err)
		}
		sc.SidecarID, _ = strings.CutPrefix(sc.Name, applicationName+"/")
		if sc.SidecarID == sc.Name {
			sc.SidecarID = ""
		}
		sidecars = append(sidecars, sc)
	}
	return serverVersion, sidecars, rows.Err()
}
