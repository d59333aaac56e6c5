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
	if a.Queue != "" {
		if err := s.RequireQueue(ctx, a.Queue, "read"); err != nil {
			return res, err
		}
	}
	// queenside.dlq_list checks read on the queue, or lists the queues the
	// role may read for "". One more than asked says whether another page
	// follows.
	rows, err := s.pool.Query(ctx, `SELECT * FROM queenside.dlq_list($1, $2, $3, $4, $5, $6, $7, $8)`,
		append(dlqFilterArgs(a.Filter()), a.AfterID, a.Limit+1)...)
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
		err := s.pool.QueryRow(ctx, `SELECT o_count, o_replayed FROM queenside.dlq_count($1, $2, $3, $4, $5, $6)`,
			dlqFilterArgs(a.Filter())...).Scan(&count, &replayed)
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
		producer  *string
	)
	err := rows.Scan(&e.ID, &e.Queue, &e.Partition, &e.Group, &e.Offset, &mid, &e.TransactionID, &e.Payload,
		&e.Error, &e.Failures, &e.CommittedAt, &e.DeadAt, &e.ReplayedAt, &replayMID, &replayTx, &e.ReplayedOffset, &producer)
	e.MessageID = mid.String()
	if replayMID != nil {
		e.ReplayedMessageID = replayMID.String()
	}
	if replayTx != nil {
		e.ReplayedTransactionID = *replayTx
	}
	if producer != nil {
		e.Producer = *producer
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
