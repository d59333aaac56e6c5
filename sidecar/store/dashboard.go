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

// queueSummaryColumns are queenside.queue_summaries' columns, in
// QueueSummary's order (scanQueueSummary).
const queueSummaryColumns = `o_queue, o_partitions, o_messages, o_pushed, o_consumed, o_groups,
	o_lease_seconds, o_retry_limit, o_dedup_window_seconds, o_retention_seconds, o_completed_retention_seconds,
	o_delay_seconds, o_consumption_paused, o_encrypt_payloads, o_max_deliveries`

func scanQueueSummary(row pgx.Row, q *QueueSummary) error {
	return row.Scan(append([]any{&q.Queue, &q.Partitions, &q.Messages, &q.Pushed, &q.Consumed, &q.Groups},
		scanOptions(&q.Options)...)...)
}

// QueueSummaries lists every queue the role may read with its totals
// (queenside.queue_summaries).
func (s *Store) QueueSummaries(ctx context.Context) ([]QueueSummary, error) {
	rows, err := s.pool.Query(ctx, "SELECT "+queueSummaryColumns+" FROM queenside.queue_summaries()")
	if err != nil {
		return nil, fmt.Errorf("queue summaries: %w", err)
	}
	defer rows.Close()
	out := []QueueSummary{}
	for rows.Next() {
		var q QueueSummary
		if err := scanQueueSummary(rows, &q); err != nil {
			return nil, fmt.Errorf("queue summaries: %w", err)
		}
		out = append(out, q)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("queue summaries: %w", err)
	}
	return out, nil
}

// QueueSummary is one queue's totals and its groups
// (queenside.queue_summaries and queenside.group_summaries, which need
// read on the queue).
func (s *Store) QueueSummary(ctx context.Context, queue string) (QueueSummary, []GroupSummary, error) {
	var q QueueSummary
	err := scanQueueSummary(s.pool.QueryRow(ctx, "SELECT "+queueSummaryColumns+" FROM queenside.queue_summaries($1)", queue), &q)
	if errors.Is(err, pgx.ErrNoRows) {
		return q, nil, fmt.Errorf("%w: %s", ErrQueueNotFound, queue)
	}
	if err != nil {
		return q, nil, fmt.Errorf("queue summary %s: %w", queue, err)
	}
	// Lag as in Groups: what the cursors have not passed, a cursor not
	// positioned yet counting from where its subscription starts.
	rows, err := s.pool.Query(ctx, "SELECT o_group, o_lag, o_consumed, o_leased, o_oldest FROM queenside.group_summaries($1)", queue)
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
	if err := rows.Err(); err != nil {
		return q, nil, fmt.Errorf("queue summary %s: groups: %w", queue, err)
	}
	return q, groups, nil
}

// PartitionPage is up to limit partitions of a queue in name order, after
// the name after ("" from the first), whose names start with prefix. next
// is the after of the following page, "" on the last
// (queenside.partition_page and queenside.cursor_stats, which need read on
// the queue).
func (s *Store) PartitionPage(ctx context.Context, queue, after, prefix string, limit int) (page []PartitionSummary, next string, err error) {
	// One more row than asked says whether another page follows.
	rows, err := s.pool.Query(ctx, `SELECT o_partition_id, o_partition, o_head, o_messages, o_last_committed_at
		FROM queenside.partition_page($1, $2, $3, $4)`, queue, after, prefix, limit+1)
	if err != nil {
		return nil, "", fmt.Errorf("partitions of %s: %w", queue, err)
	}
	var ids []int64
	byID := map[int64]int{}
	page = []PartitionSummary{}
	found := false
	for rows.Next() {
		found = true
		var id, head, messages *int64
		var name *string
		p := PartitionSummary{Groups: []CursorSummary{}}
		if err := rows.Scan(&id, &name, &head, &messages, &p.LastCommittedAt); err != nil {
			rows.Close()
			return nil, "", fmt.Errorf("partitions of %s: %w", queue, err)
		}
		if id == nil { // the queue, without such partitions
			continue
		}
		p.Partition, p.HeadOffset, p.Messages = *name, *head, *messages
		byID[*id] = len(page)
		ids = append(ids, *id)
		page = append(page, p)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("partitions of %s: %w", queue, err)
	}
	if !found {
		return nil, "", fmt.Errorf("%w: %s", ErrQueueNotFound, queue)
	}
	if len(page) > limit {
		delete(byID, ids[limit])
		ids, page = ids[:limit], page[:limit]
		next = page[limit-1].Partition
	}
	if len(ids) == 0 {
		return page, next, nil
	}
	rows, err = s.pool.Query(ctx, "SELECT o_partition_id, o_group, o_cursor, o_lease_expires_at FROM queenside.cursor_stats($1, $2)",
		queue, ids)
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
		i, ok := byID[id]
		if !ok {
			continue
		}
		p := &page[i]
		c.Leased = c.LeaseExpiresAt != nil
		// As stats counts it: a cursor behind retention skips what is gone.
		c.Lag = max(p.HeadOffset-max(c.Cursor, p.HeadOffset-p.Messages), 0)
		p.Groups = append(p.Groups, c)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("partitions of %s: cursors: %w", queue, err)
	}
	return page, next, nil
}

// SidecarSessions lists the sidecars connected to this database now, by
// the application name each gives its sessions ("queenside/<sidecar id>").
// It reads no table of queenside's. A role without pg_read_all_stats sees
// the start and address of its own sessions only: Since is zero, and the
// address 'local', for a sidecar logged in as another role.
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
		var since *time.Time // NULL for a role that may not see the sessions' details
		if err := rows.Scan(&sc.Name, &sc.Connections, &since, &sc.ClientAddrs); err != nil {
			return serverVersion, nil, fmt.Errorf("sidecar sessions: %w", err)
		}
		if since != nil {
			sc.Since = *since
		}
		sc.SidecarID, _ = strings.CutPrefix(sc.Name, applicationName+"/")
		if sc.SidecarID == sc.Name {
			sc.SidecarID = ""
		}
		sidecars = append(sidecars, sc)
	}
	return serverVersion, sidecars, rows.Err()
}
