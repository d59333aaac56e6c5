package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/queenside/queenside/protocol"
)

// Bulk actions on dead letters: a batch read by ids or by filter, its
// replay in one transaction with the marks, deletion, and the counts by
// error.

// dlqFilterSQL is a protocol.DLQFilter's condition on queenside.dead_letters
// after the queue's, with dlqFilterArgs as $2..$6. A queue's listing reads
// the (queue_name, id) index in id order; the other conditions filter it.
const dlqFilterSQL = `($2::text IS NULL OR group_name = $2) AND ($3::text IS NULL OR partition_name = $3)
	AND ($4 = '' OR strpos(coalesce(error, ''), $4) > 0)
	AND ($5::timestamptz IS NULL OR dead_at >= $5) AND ($6::timestamptz IS NULL OR dead_at < $6)`

// dlqFilterArgs are $1..$6: the queue and dlqFilterSQL's.
func dlqFilterArgs(f protocol.DLQFilter) []any {
	return []any{f.Queue, f.Group, f.Partition, f.ErrorContains, f.DeadFrom, f.DeadTo}
}

// DeadLetters reads the entries a selection names: those of its ids that
// exist, or the next batch of its filter in id order. next is where the
// batch after starts, nil when this one is the last.
func (s *Store) DeadLetters(ctx context.Context, sel protocol.DLQSelection) (_ []DeadLetter, next *int64, _ error) {
	const columns = `SELECT id, partition_id, queue_name, partition_name, message_id, payload, trace_id, headers,
		replayed_at IS NOT NULL FROM queenside.dead_letters`
	var rows pgx.Rows
	var err error
	if sel.ByFilter() {
		if err := s.queueExists(ctx, sel.Queue); err != nil {
			return nil, nil, err
		}
		rows, err = s.pool.Query(ctx, columns+` WHERE queue_name = $1 AND `+dlqFilterSQL+` AND id > $7
			ORDER BY id LIMIT $8`, append(dlqFilterArgs(sel.DLQFilter), sel.AfterID, sel.Limit+1)...)
	} else {
		rows, err = s.pool.Query(ctx, columns+` WHERE id = ANY($1) ORDER BY id`, sel.IDs)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("dlq: read entries: %w", err)
	}
	dls, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (DeadLetter, error) {
		var d DeadLetter
		var trace *string
		err := row.Scan(&d.ID, &d.PartitionID, &d.Queue, &d.Partition, &d.MessageID, &d.Payload, &trace, &d.Headers, &d.Replayed)
		if trace != nil {
			d.TraceID = *trace
		}
		return d, err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("dlq: read entries: %w", err)
	}
	if sel.ByFilter() && len(dls) > sel.Limit {
		dls = dls[:sel.Limit]
		last := dls[len(dls)-1].ID
		next = &last
	}
	return dls, next, nil
}

// ReplayDeadLetters pushes msgs[i] as the replay of dls[i] and records it
// on the entry, all in one transaction: a replay is stored with its mark or
// not at all, so a batch interrupted and run again replays each entry once.
// Unless again, an entry found replayed already (by a concurrent replay, or
// before) is left alone, its outcome nil; the rows are locked first, so two
// replays of one entry cannot both see it unreplayed.
func (s *Store) ReplayDeadLetters(ctx context.Context, dls []DeadLetter, msgs []Message, again bool) (out []*Outcome, err error) {
	err = againIfAborted(ctx, func() (err error) {
		out, err = s.replayDeadLetters(ctx, dls, msgs, again)
		if isNoData(err) { // a cached partition is gone
			s.parts.reset()
			out, err = s.replayDeadLetters(ctx, dls, msgs, again)
		}
		return err
	})
	return out, err
}

func (s *Store) replayDeadLetters(ctx context.Context, dls []DeadLetter, msgs []Message, again bool) ([]*Outcome, error) {
	out := make([]*Outcome, len(dls))
	partIDs, ids := make([]int64, len(dls)), make([]int64, len(dls))
	for i, d := range dls {
		partIDs[i], ids[i] = d.PartitionID, d.ID
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("dlq replay: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	rows, err := tx.Query(ctx, `SELECT d.id FROM queenside.dead_letters d
		JOIN unnest($1::bigint[], $2::bigint[]) AS k(partition_id, id) ON d.partition_id = k.partition_id AND d.id = k.id
		WHERE $3 OR d.replayed_at IS NULL
		ORDER BY d.id FOR UPDATE OF d`, partIDs, ids, again)
	if err != nil {
		return nil, fmt.Errorf("dlq replay: lock entries: %w", err)
	}
	locked, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("dlq replay: lock entries: %w", err)
	}
	keep := make(map[int64]bool, len(locked))
	for _, id := range locked {
		keep[id] = true
	}
	var positions []int
	var kept []Message
	for i, d := range dls {
		if keep[d.ID] {
			positions, kept = append(positions, i), append(kept, msgs[i])
		}
	}
	if len(kept) == 0 {
		return out, nil
	}
	partitions, shards, err := s.pushShards(ctx, kept)
	if err != nil {
		return nil, err
	}
	outcomes, err := pushThrough(ctx, tx, kept, partitions, shards, s.routed())
	if err != nil {
		return nil, fmt.Errorf("dlq replay: push: %w", err)
	}
	n := len(kept)
	markPart, markID, markMID := make([]int64, n), make([]int64, n), make([]uuid.UUID, n)
	markTx, markOffset, markAt := make([]string, n), make([]int64, n), make([]time.Time, n)
	for k, i := range positions {
		o := outcomes[k]
		markPart[k], markID[k], markMID[k] = dls[i].PartitionID, dls[i].ID, o.MessageID
		markTx[k], markOffset[k], markAt[k] = kept[k].TransactionID, o.Offset, o.CommittedAt
		out[i] = &outcomes[k]
	}
	_, err = tx.Exec(ctx, `UPDATE queenside.dead_letters d
		SET replayed_at = m.at, replay_message_id = m.mid, replay_transaction_id = m.tx, replay_offset = m.off
		FROM unnest($1::bigint[], $2::bigint[], $3::uuid[], $4::text[], $5::bigint[], $6::timestamptz[])
		     AS m(partition_id, id, mid, tx, off, at)
		WHERE d.partition_id = m.partition_id AND d.id = m.id`,
		markPart, markID, markMID, markTx, markOffset, markAt)
	if err != nil {
		return nil, fmt.Errorf("dlq replay: record the replays: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("dlq replay: commit: %w", err)
	}
	s.wakeRouted(kept)
	s.wakeLocally(kept)
	return out, nil
}

// DeleteDeadLetters deletes the entries a selection names: its ids, or the
// next batch of its filter (at most sel.Limit entries a statement, so that
// no statement holds more rows locked). next is where the batch after
// starts, nil when this one was the last.
func (s *Store) DeleteDeadLetters(ctx context.Context, sel protocol.DLQSelection) (deleted int, next *int64, _ error) {
	if !sel.ByFilter() {
		tag, err := s.pool.Exec(ctx, `DELETE FROM queenside.dead_letters WHERE id = ANY($1)`, sel.IDs)
		if err != nil {
			return 0, nil, fmt.Errorf("dlq delete: %w", err)
		}
		return int(tag.RowsAffected()), nil, nil
	}
	if err := s.queueExists(ctx, sel.Queue); err != nil {
		return 0, nil, err
	}
	var looked int
	var last *int64
	err := s.pool.QueryRow(ctx, `WITH batch AS (
			SELECT partition_id, id FROM queenside.dead_letters
			 WHERE queue_name = $1 AND `+dlqFilterSQL+` AND id > $7 ORDER BY id LIMIT $8),
		gone AS (
			DELETE FROM queenside.dead_letters d USING batch b
			 WHERE d.partition_id = b.partition_id AND d.id = b.id RETURNING d.id)
		SELECT (SELECT count(*) FROM batch), (SELECT max(id) FROM batch), (SELECT count(*) FROM gone)`,
		append(dlqFilterArgs(sel.DLQFilter), sel.AfterID, sel.Limit)...).Scan(&looked, &last, &deleted)
	if err != nil {
		return 0, nil, fmt.Errorf("dlq delete: %w", err)
	}
	if looked == sel.Limit { // a full batch: more may follow
		next = last
	}
	return deleted, next, nil
}

// DLQSummary counts a queue's dead letters (every queue's for "") by
// group and error, the most frequent first.
func (s *Store) DLQSummary(ctx context.Context, a protocol.DLQSummaryArgs) ([]protocol.DLQErrorCount, error) {
	if a.Queue != "" {
		if err := s.queueExists(ctx, a.Queue); err != nil {
			return nil, err
		}
	}
	rows, err := s.pool.Query(ctx, `SELECT queue_name, group_name, coalesce(error, ''), count(*), count(replayed_at),
		       min(dead_at), max(dead_at)
		  FROM queenside.dead_letters WHERE $1 = '' OR queue_name = $1
		 GROUP BY 1, 2, 3 ORDER BY 4 DESC, 1, 2, 3 LIMIT $2`, a.Queue, a.Limit)
	if err != nil {
		return nil, fmt.Errorf("dlq summary: %w", err)
	}
	counts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (protocol.DLQErrorCount, error) {
		var c protocol.DLQErrorCount
		err := row.Scan(&c.Queue, &c.Group, &c.Error, &c.Count, &c.Replayed, &c.FirstDeadAt, &c.LastDeadAt)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("dlq summary: %w", err)
	}
	return counts, nil
}
