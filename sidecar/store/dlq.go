package store

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/queenside/queenside/protocol"
)

// DLQ lists a queue's dead letters in id order after args.AfterID,
// filtered by group and partition when given. An empty queue lists every
// queue's (the dashboard's view; the dlq op always names one).
func (s *Store) DLQ(ctx context.Context, a protocol.DLQArgs) (protocol.DLQResult, error) {
	res := protocol.DLQResult{Entries: []protocol.DLQEntry{}}
	// The queue's condition is left out rather than made optional, so that
	// a listing of one queue always reads the (queue_name, id) index.
	byQueue := "$1 = ''"
	if a.Queue != "" {
		if err := s.queueExists(ctx, a.Queue); err != nil {
			return res, err
		}
		byQueue = "queue_name = $1"
	}
	f := a.Filter()
	// One more than asked says whether another page follows.
	rows, err := s.pool.Query(ctx, `
		SELECT id, queue_name, partition_name, group_name, msg_offset, message_id, transaction_id, payload,
		       coalesce(error, ''), failures, committed_at, dead_at, replayed_at,
		       replay_message_id, replay_transaction_id, replay_offset
		  FROM queenside.dead_letters
		 WHERE `+byQueue+` AND `+dlqFilterSQL+` AND id > $7
		 ORDER BY id LIMIT $8`, append(dlqFilterArgs(f), a.AfterID, a.Limit+1)...)
	if err != nil {
		return res, fmt.Errorf("dlq %s: %w", a.Queue, err)
	}
	defer rows.Close()
	for rows.Next() {
		e, err := scanDeadLetter(rows)
		if err != nil {
			return res, fmt.Errorf("dlq %s: %w", a.Queue, err)
		}
		res.Entries = append(res.Entries, e)
	}
	if err := rows.Err(); err != nil {
		return res, fmt.Errorf("dlq %s: %w", a.Queue, err)
	}
	if len(res.Entries) > a.Limit {
		res.Entries = res.Entries[:a.Limit]
		next := res.Entries[a.Limit-1].ID
		res.NextAfterID = &next
	}
	if a.Count {
		var count, replayed int64
		err := s.pool.QueryRow(ctx, `SELECT count(*), count(replayed_at) FROM queenside.dead_letters
			WHERE `+byQueue+` AND `+dlqFilterSQL, dlqFilterArgs(f)...).Scan(&count, &replayed)
		if err != nil {
			return res, fmt.Errorf("dlq %s: count: %w", a.Queue, err)
		}
		res.Count, res.ReplayedCount = &count, &replayed
	}
	return res, nil
}

func scanDeadLetter(rows pgx.Rows) (protocol.DLQEntry, error) {
	var (
		e         protocol.DLQEntry
		mid       uuid.UUID
		replayMID *uuid.UUID
		replayTx  *string
	)
	err := rows.Scan(&e.ID, &e.Queue, &e.Partition, &e.Group, &e.Offset, &mid, &e.TransactionID, &e.Payload,
		&e.Error, &e.Failures, &e.CommittedAt, &e.DeadAt, &e.ReplayedAt, &replayMID, &replayTx, &e.ReplayedOffset)
	e.MessageID = mid.String()
	if replayMID != nil {
		e.ReplayedMessageID = replayMID.String()
	}
	if replayTx != nil {
		e.ReplayedTransactionID = *replayTx
	}
	return e, err
}

// DeadLetter is what replaying an entry needs of it.
type DeadLetter struct {
	ID          int64
	PartitionID int64 // with ID, the entry's key: a look-up on its shard alone
	Queue       string
	Partition   string
	MessageID   uuid.UUID // the original's: a sealed payload is bound to it
	Payload     []byte
	TraceID     string
	Headers     []byte
	Replayed    bool // replayed at least once already
}
