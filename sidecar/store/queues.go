package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queenside/queenside/protocol"
)

// ErrQueueNotFound is returned for a queue that was never created.
var ErrQueueNotFound = errors.New("store: queue not found")

// optionColumns are the options' columns of queenside.configure's and
// queenside.queue_list's results, in scanOptions' order.
const optionColumns = `o_lease_seconds, o_retry_limit, o_dedup_window_seconds,
	o_retention_seconds, o_completed_retention_seconds, o_delay_seconds, o_consumption_paused, o_encrypt_payloads, o_max_deliveries`

func scanOptions(o *protocol.QueueOptions) []any {
	return []any{&o.LeaseSeconds, &o.RetryLimit, &o.DedupWindowSeconds,
		&o.RetentionSeconds, &o.CompletedRetentionSeconds, &o.DelaySeconds, &o.ConsumptionPaused, &o.EncryptPayloads, &o.MaxDeliveries}
}

// Configure replaces every option of a queue, creating it if needed, and
// returns the options now in force (queenside.configure, which needs
// manage on the queue). It is announced to every sidecar (ControlPayload)
// in the same transaction, which then reads the queues'
// consumptionPaused and encryptPayloads again. The announcement is its own
// statement, on no table: on Citus a statement on a table may run on
// another node, where no sidecar listens.
func (s *Store) Configure(ctx context.Context, queue string, o protocol.QueueOptions) (protocol.QueueOptions, error) {
	var got protocol.QueueOptions
	var b pgx.Batch
	b.Queue("SELECT "+optionColumns+" FROM queenside.configure($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
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

// Queues lists every queue the role may read with its partition count and
// options (queenside.queue_list).
func (s *Store) Queues(ctx context.Context) ([]protocol.QueueInfo, error) {
	rows, err := s.pool.Query(ctx, "SELECT o_queue, o_partitions, "+optionColumns+" FROM queenside.queue_list()")
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
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list queues: %w", err)
	}
	return out, nil
}

// Stats describes each partition of a queue: the next offset and how many
// messages are retained, and each group's cursor, lag and lease there
// (queenside.partition_stats and queenside.cursor_stats, which need read
// on the queue).
func (s *Store) Stats(ctx context.Context, queue string) (protocol.StatsResult, error) {
	res := protocol.StatsResult{Queue: queue, Partitions: []protocol.PartitionStats{}}
	rows, err := s.pool.Query(ctx, "SELECT o_partition, o_head, o_messages FROM queenside.partition_stats($1)", queue)
	if err != nil {
		return res, fmt.Errorf("stats %s: %w", queue, err)
	}
	defer rows.Close()
	byName := map[string]int{}
	found := false
	for rows.Next() {
		found = true
		var name *string
		var head, messages *int64
		if err := rows.Scan(&name, &head, &messages); err != nil {
			return res, fmt.Errorf("stats %s: %w", queue, err)
		}
		if name == nil { // the queue, without partitions
			continue
		}
		ps := protocol.PartitionStats{Partition: *name, HeadOffset: *head, Messages: *messages, Groups: []protocol.GroupStats{}}
		byName[ps.Partition] = len(res.Partitions)
		res.Partitions = append(res.Partitions, ps)
	}
	if err := rows.Err(); err != nil {
		return res, fmt.Errorf("stats %s: %w", queue, err)
	}
	if !found {
		return res, ErrQueueNotFound
	}
	return res, s.addGroupStats(ctx, &res, byName)
}

// cursorPosition is where cursor c of group g stands in partition p, as
// the management reads show it: a cursor not positioned yet stands at the
// partition's end while its subscription is ahead, and once it has begun,
// at the first message committed since, where the group's next pop
// positions it. A look-up of the partition's segments, not a call of
// first_offset_at: on Citus a function that reads a distributed table
// cannot be called inside a read of one (SCALING.md, section 4, R6). The
// functions of version 26 (cursor_stats, group_summaries, queue_counters,
// group_position) hold it written out; Groups (grouplist.go) uses it here.
const cursorPosition = `CASE WHEN c.committed IS NOT NULL THEN c.committed
	WHEN g.start_at > now() THEN p.next_offset
	ELSE coalesce((SELECT s.base_offset FROM queenside.segments s
	                WHERE s.partition_id = c.partition_id AND (g.start_at IS NULL OR s.committed_at >= g.start_at)
	                ORDER BY s.last_offset LIMIT 1), p.next_offset) END`

// addGroupStats adds each group's cursor, lag and lease to the partitions.
// A cursor the group has not used yet stands where its subscription starts.
func (s *Store) addGroupStats(ctx context.Context, res *protocol.StatsResult, byName map[string]int) error {
	rows, err := s.pool.Query(ctx, "SELECT o_partition, o_group, o_cursor, o_head, o_lease_expires_at FROM queenside.cursor_stats($1)",
		res.Queue)
	if err != nil {
		return fmt.Errorf("stats %s: groups: %w", res.Queue, err)
	}
	defer rows.Close()
	for rows.Next() {
		var partition string
		var gs protocol.GroupStats
		var head int64
		var leaseExpiresAt *time.Time
		if err := rows.Scan(&partition, &gs.Group, &gs.Cursor, &head, &leaseExpiresAt); err != nil {
			return fmt.Errorf("stats %s: groups: %w", res.Queue, err)
		}
		i, ok := byName[partition]
		if !ok {
			continue
		}
		gs.Leased = leaseExpiresAt != nil
		// Lag counts what the group will still be delivered: a cursor left
		// behind by retention skips the deleted messages.
		p := &res.Partitions[i]
		gs.Lag = max(head-max(gs.Cursor, p.HeadOffset-p.Messages), 0)
		p.Groups = append(p.Groups, gs)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("stats %s: groups: %w", res.Queue, err)
	}
	return nil
}
