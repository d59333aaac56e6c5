package store

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/queenside/queenside/protocol"
)

// Bulk actions on dead letters: a batch read by ids or by filter, its
// replay in one transaction with the marks, deletion, and the counts by
// error.

// dlqFilterArgs are a protocol.DLQFilter as the queenside.dlq_* functions
// take it: the queue ("" for every queue where a function allows it), the
// group and partition (NULL: any), a substring of the error ("": any), and
// the bounds of the time of death (NULL: none).
func dlqFilterArgs(f protocol.DLQFilter) []any {
	return []any{f.Queue, f.Group, f.Partition, f.ErrorContains, f.DeadFrom, f.DeadTo}
}

// dlqSelectionArgs are a selection as queenside.dlq_entries and dlq_delete
// take it: the ids (NULL for a filter), the filter, where the batch starts
// and its size.
func dlqSelectionArgs(sel protocol.DLQSelection, limit int) []any {
	var ids []int64
	if !sel.ByFilter() {
		ids = sel.IDs
	}
	return append(append([]any{ids}, dlqFilterArgs(sel.DLQFilter)...), sel.AfterID, limit)
}

// DeadLetters reads the entries a selection names: those of its ids that
// exist, or the next batch of its filter in id order. next is where the
// batch after starts, nil when this one is the last.
func (s *Store) DeadLetters(ctx context.Context, sel protocol.DLQSelection) (_ []DeadLetter, next *int64, _ error) {
	if sel.ByFilter() {
		if err := s.RequireQueue(ctx, sel.Queue, "manage"); err != nil {
			return nil, nil, err
		}
	}
	// queenside.dlq_entries checks manage: on the filter's queue, or, by
	// ids, on the queue of each entry (dlq_manageable says how).
	rows, err := s.pool.Query(ctx, `SELECT * FROM queenside.dlq_entries($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
		dlqSelectionArgs(sel, sel.Limit+1)...)
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
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("dlq replay: begin: %w", err)
	}
	defer s.rollback(ctx, tx)
	keep, err := lockDeadLetters(ctx, tx, dls, again)
	if err != nil {
		return nil, fmt.Errorf("dlq replay: lock entries: %w", err)
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
	outcomes, err := s.pushThrough(ctx, tx, kept, partitions, shards)
	if err != nil {
		return nil, fmt.Errorf("dlq replay: push: %w", err)
	}
	marks := &pgx.Batch{}
	for _, pid := range partitionOrder(positions, func(i int) int64 { return dls[i].PartitionID }) {
		var ids, offsets []int64
		var mids []uuid.UUID
		var txs []string
		var ats []time.Time
		for k, i := range positions {
			if dls[i].PartitionID == pid {
				o := outcomes[k]
				ids, mids, txs = append(ids, dls[i].ID), append(mids, o.MessageID), append(txs, kept[k].TransactionID)
				offsets, ats = append(offsets, o.Offset), append(ats, o.CommittedAt)
			}
		}
		marks.Queue(`SELECT queenside.dlq_mark_replayed($1, $2, $3, $4, $5, $6)`, pid, ids, mids, txs, offsets, ats)
	}
	for k, i := range positions {
		out[i] = &outcomes[k]
	}
	if err := tx.SendBatch(ctx, marks).Close(); err != nil {
		return nil, fmt.Errorf("dlq replay: record the replays: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("dlq replay: commit: %w", err)
	}
	s.wakeRouted(kept)
	s.wakeLocally(kept)
	return out, nil
}

// lockDeadLetters locks the entries of dls still to replay (every one
// when again) and tells which they are. A statement a partition, in
// partition and id order, sent together: each is a single-shard statement
// on Citus, which refuses a row lock over several shards.
func lockDeadLetters(ctx context.Context, tx pgx.Tx, dls []DeadLetter, again bool) (map[int64]bool, error) {
	pids := partitionOrder(dls, func(d DeadLetter) int64 { return d.PartitionID })
	lock := &pgx.Batch{}
	for _, pid := range pids {
		var ids []int64
		for _, d := range dls {
			if d.PartitionID == pid {
				ids = append(ids, d.ID)
			}
		}
		lock.Queue(`SELECT * FROM queenside.dlq_lock($1, $2, $3)`, pid, ids, again)
	}
	br := tx.SendBatch(ctx, lock)
	defer br.Close()
	keep := map[int64]bool{}
	for range pids {
		rows, err := br.Query()
		if err != nil {
			return nil, err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			keep[id] = true
		}
	}
	return keep, br.Close()
}

// partitionOrder is the distinct partitions of items in ascending order,
// the order their rows are locked in.
func partitionOrder[T any](items []T, partition func(T) int64) []int64 {
	var pids []int64
	for _, it := range items {
		pids = append(pids, partition(it))
	}
	slices.Sort(pids)
	return slices.Compact(pids)
}

// DeleteDeadLetters deletes the entries a selection names: its ids, or the
// next batch of its filter (at most sel.Limit entries a statement, so that
// no statement holds more rows locked). next is where the batch after
// starts, nil when this one was the last.
func (s *Store) DeleteDeadLetters(ctx context.Context, sel protocol.DLQSelection) (deleted int, next *int64, _ error) {
	if sel.ByFilter() {
		if err := s.RequireQueue(ctx, sel.Queue, "manage"); err != nil {
			return 0, nil, err
		}
	}
	// queenside.dlq_delete checks manage as dlq_entries does, and reads the
	// batch and deletes it by its keys in one transaction, its own.
	var read int
	var last *int64
	err := s.pool.QueryRow(ctx, `SELECT o_deleted, o_read, o_last_id FROM queenside.dlq_delete($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
		dlqSelectionArgs(sel, sel.Limit)...).Scan(&deleted, &read, &last)
	if err != nil {
		return 0, nil, fmt.Errorf("dlq delete: %w", err)
	}
	if sel.ByFilter() && read > 0 && read == sel.Limit { // a full batch: more may follow
		next = last
	}
	return deleted, next, nil
}

// DLQSummary counts a queue's dead letters (every queue's for "") by
// group and error, the most frequent first.
func (s *Store) DLQSummary(ctx context.Context, a protocol.DLQSummaryArgs) ([]protocol.DLQErrorCount, error) {
	if a.Queue != "" {
		if err := s.RequireQueue(ctx, a.Queue, "read"); err != nil {
			return nil, err
		}
	}
	// queenside.dlq_summary checks read on the queue, or counts the queues
	// the role may read for "".
	rows, err := s.pool.Query(ctx, `SELECT * FROM queenside.dlq_summary($1, $2)`, a.Queue, a.Limit)
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
