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
		marks.Queue(`UPDATE queenside.dead_letters d
			SET replayed_at = m.at, replay_message_id = m.mid, replay_transaction_id = m.tx, replay_offset = m.off
			FROM unnest($2::bigint[], $3::uuid[], $4::text[], $5::bigint[], $6::timestamptz[]) AS m(id, mid, tx, off, at)
			WHERE d.partition_id = $1 AND d.id = m.id`, pid, ids, mids, txs, offsets, ats)
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
		lock.Queue(`SELECT id FROM queenside.dead_letters
			WHERE partition_id = $1 AND id = ANY($2) AND ($3 OR replayed_at IS NULL)
			ORDER BY id FOR UPDATE`, pid, ids, again)
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
	batch, args := `SELECT partition_id, id FROM queenside.dead_letters WHERE id = ANY($1)`, []any{sel.IDs}
	if sel.ByFilter() {
		if err := s.queueExists(ctx, sel.Queue); err != nil {
			return 0, nil, err
		}
		batch = `SELECT partition_id, id FROM queenside.dead_letters
			WHERE queue_name = $1 AND ` + dlqFilterSQL + ` AND id > $7 ORDER BY id LIMIT $8`
		args = append(dlqFilterArgs(sel.DLQFilter), sel.AfterID, sel.Limit)
	}
	// The batch is read, then deleted by its keys, its partitions naming
	// the shards: on Citus a statement that modifies several shards can
	// neither read them in a CTE nor go unpruned (R1).
	err := s.inTx(ctx, pgx.TxOptions{}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, batch, args...)
		if err != nil {
			return err
		}
		var pids, ids []int64
		var pid, id int64
		if _, err := pgx.ForEachRow(rows, []any{&pid, &id}, func() error {
			pids, ids = append(pids, pid), append(ids, id)
			return nil
		}); err != nil {
			return err
		}
		if len(ids) == 0 {
			return nil
		}
		if sel.ByFilter() && len(ids) == sel.Limit { // a full batch: more may follow
			next = &ids[len(ids)-1]
		}
		tag, err := tx.Exec(ctx, `DELETE FROM queenside.dead_letters WHERE partition_id = ANY($1) AND id = ANY($2)`, pids, ids)
		deleted = int(tag.RowsAffected())
		return err
	})
	if err != nil {
		return 0, nil, fmt.Errorf("dlq delete: %w", err)
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
