package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/queenside/queenside/protocol"
)

// ErrQueueNotFound is returned for a queue that was never created.
var ErrQueueNotFound = errors.New("store: queue not found")

const optionColumns = `lease_seconds, retry_limit, dedup_window_seconds,
	retention_seconds, completed_retention_seconds, delay_seconds, consumption_paused, encrypt_payloads, max_deliveries`

func scanOptions(o *protocol.QueueOptions) []any {
	return []any{&o.LeaseSeconds, &o.RetryLimit, &o.DedupWindowSeconds,
		&o.RetentionSeconds, &o.CompletedRetentionSeconds, &o.DelaySeconds, &o.ConsumptionPaused, &o.EncryptPayloads, &o.MaxDeliveries}
}

// Configure replaces every option of a queue, creating it if needed, and
// returns the options now in force. It is announced to every sidecar
// (ControlPayload) in the same transaction, which then reads the queues'
// consumptionPaused and encryptPayloads again. The announcement is its own
// statement, on no table: on Citus a statement on a table may run on
// another node, where no sidecar listens.
func (s *Store) Configure(ctx context.Context, queue string, o protocol.QueueOptions) (protocol.QueueOptions, error) {
	var got protocol.QueueOptions
	var b pgx.Batch
	b.Queue(`
		INSERT INTO queenside.queues (name, `+optionColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
		ON CONFLICT (name) DO UPDATE SET
			lease_seconds = excluded.lease_seconds,
			retry_limit = excluded.retry_limit,
			dedup_window_seconds = excluded.dedup_window_seconds,
			retention_seconds = excluded.retention_seconds,
			completed_retention_seconds = excluded.completed_retention_seconds,
			delay_seconds = excluded.delay_seconds,
			consumption_paused = excluded.consumption_paused,
			encrypt_payloads = excluded.encrypt_payloads,
			max_deliveries = excluded.max_deliveries
		RETURNING `+optionColumns,
		queue, o.LeaseSeconds, o.RetryLimit, o.DedupWindowSeconds,
		o.RetentionSeconds, o.CompletedRetentionSeconds, o.DelaySeconds, o.ConsumptionPaused, o.EncryptPayloads, o.MaxDeliveries,
	).QueryRow(func(row pgx.Row) error { return row.Scan(scanOptions(&got)...) })
	b.Queue("SELECT pg_notify($1, $2)", WakeChannel, ControlPayload)
	// One batch is one transaction.
	if err := s.pool.SendBatch(ctx, &b).Close(); err != nil {
		return got, fmt.Errorf("configure %s: %w", queue, err)
	}
	return got, nil
}

// Queues lists every queue with its partition count and options.
func (s *Store) Queues(ctx context.Context) ([]protocol.QueueInfo, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT q.name, (SELECT count(*) FROM queenside.partition_names n WHERE n.queue_id = q.id), `+optionColumns+`
		FROM queenside.queues q ORDER BY q.name`)
	if err != nil {
		return nil, fmt.Errorf("list queues: %w", err)
	}
	defer rows.Close()
	out := []protocol.QueueInfo{}
	for rows.Next() {
		var qi protocol.QueueInfo
		if err := rows.Scan(append([]any{&qi.Queue, &qi.Partitions}, scanOptions(&qi.Options)...)...); err != nil {
			return nil, fmt.Errorf("list queues: %w", err)
		}
		out = append(out, qi)
	}
	return out, rows.Err()
}

// Stats describes each partition of a queue: the next offset and how many
// messages are retained. Retention only removes whole segments from the
// front, so the oldest retained offset is the first segment's base.
func (s *Store) Stats(ctx context.Context, queue string) (protocol.StatsResult, error) {
	res := protocol.StatsResult{Queue: queue, Partitions: []protocol.PartitionStats{}}
	var queueID int64
	err := s.pool.QueryRow(ctx, "SELECT id FROM queenside.queues WHERE name = $1", queue).Scan(&queueID)
	if errors.Is(err, pgx.ErrNoRows) {
		return res, ErrQueueNotFound
	}
	if err != nil {
		return res, fmt.Errorf("stats %s: %w", queue, err)
	}
	rows, err := s.pool.Query(ctx, `
		SELECT p.name, p.next_offset,
		       p.next_offset - coalesce((SELECT sg.base_offset FROM queenside.segments sg
		                                  WHERE sg.partition_id = p.id
		                                  ORDER BY sg.last_offset LIMIT 1), p.next_offset)
		FROM queenside.partitions p WHERE p.queue_id = $1 ORDER BY p.name`, queueID)
	if err != nil {
		return res, fmt.Errorf("stats %s: %w", queue, err)
	}
	defer rows.Close()
	byName := map[string]int{}
	for rows.Next() {
		ps := protocol.PartitionStats{Groups: []protocol.GroupStats{}}
		if err := rows.Scan(&ps.Partition, &ps.HeadOffset, &ps.Messages); err != nil {
			return res, fmt.Errorf("stats %s: %w", queue, err)
		}
		byName[ps.Partition] = len(res.Partitions)
		res.Partitions = append(res.Partitions, ps)
	}
	if err := rows.Err(); err != nil {
		return res, fmt.Errorf("stats %s: %w", queue, err)
	}
	return res, s.addGroupStats(ctx, queueID, &res, byName)
}

// cursorPosition is where cursor c of group g stands in partition p, as
// the management reads show it: a cursor not positioned yet stands at the
// partition's end while its subscription is ahead, and once it has begun,
// at the first message committed since, where the group's next pop
// positions it. A look-up of the partition's segments, not a call of
// first_offset_at: on Citus a function that reads a distributed table
// cannot be called inside a read of one (SCALING.md, section 4, R6).
const cursorPosition = `CASE WHEN c.committed IS NOT NULL THEN c.committed
	WHEN g.start_at > now() THEN p.next_offset
	ELSE coalesce((SELECT s.base_offset FROM queenside.segments s
	                WHERE s.partition_id = c.partition_id AND (g.start_at IS NULL OR s.committed_at >= g.start_at)
	                ORDER BY s.last_offset LIMIT 1), p.next_offset) END`

// addGroupStats adds each group's cursor, lag and lease to the partitions.
// A cursor the group has not used yet stands where its subscription starts.
func (s *Store) addGroupStats(ctx context.Context, queueID int64, res *protocol.StatsResult, byName map[string]int) error {
	rows, err := s.pool.Query(ctx, `
		SELECT p.name, g.name, `+cursorPosition+` AS cur, p.next_offset,
		       c.lease_id IS NOT NULL AND c.lease_expires_at > now()
		  FROM queenside.cursors c
		  JOIN queenside.groups g ON g.id = c.group_id
		  JOIN queenside.partitions p ON p.id = c.partition_id
		 WHERE g.queue_id = $1
		 ORDER BY p.name, g.name`, queueID)
	if err != nil {
		return fmt.Errorf("stats %s: groups: %w", res.Queue, err)
	}
	defer rows.Close()
	for rows.Next() {
		var partition string
		var gs protocol.GroupStats
		var head int64
		if err := rows.Scan(&partition, &gs.Group, &gs.Cursor, &head, &gs.Leased); err != nil {
			return fmt.Errorf("stats %s: groups: %w", res.Queue, err)
		}
		i, ok := byName[partition]
		if !ok {
			continue
		}
		// Lag counts what the group will still be delivered: a cursor left
		// behind by retention skips the deleted messages.
		p := &res.Partitions[i]
		gs.Lag = max(head-max(gs.Cursor, p.HeadOffset-p.Messages), 0)
		p.Groups = append(p.Groups, gs)
	}
	return rows.Err()
}
