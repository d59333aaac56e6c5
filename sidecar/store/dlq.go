package store

import (
	"context"
	"errors"
	"fmt"
	"time"

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
	// One more than asked says whether another page follows.
	rows, err := s.pool.Query(ctx, `
		SELECT id, queue_name, partition_name, group_name, msg_offset, message_id, transaction_id, payload,
		       coalesce(error, ''), failures, committed_at, dead_at, replayed_at,
		       replay_message_id, replay_transaction_id, replay_offset
		  FROM queenside.dead_letters
		 WHERE `+byQueue+` AND id > $2
		   AND ($3::text IS NULL OR group_name = $3) AND ($4::text IS NULL OR partition_name = $4)
		 ORDER BY id LIMIT $5`, a.Queue, a.AfterID, a.Group, a.Partition, a.Limit+1)
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
}

// ErrDeadLetterNotFound is returned for an entry id that does not exist.
var ErrDeadLetterNotFound = errors.New("store: dead letter not found")

// DeadLetter reads one entry.
func (s *Store) DeadLetter(ctx context.Context, id int64) (DeadLetter, error) {
	d := DeadLetter{ID: id}
	var trace *string
	err := s.pool.QueryRow(ctx, `SELECT partition_id, queue_name, partition_name, message_id, payload, trace_id, headers
		FROM queenside.dead_letters WHERE id = $1`, id).Scan(&d.PartitionID, &d.Queue, &d.Partition, &d.MessageID, &d.Payload, &trace, &d.Headers)
	if errors.Is(err, pgx.ErrNoRows) {
		return d, fmt.Errorf("%w: %d", ErrDeadLetterNotFound, id)
	}
	if trace != nil {
		d.TraceID = *trace
	}
	return d, err
}

// MarkDeadLetterReplayed records as what an entry, read by DeadLetter,
// was last replayed.
func (s *Store) MarkDeadLetterReplayed(ctx context.Context, d DeadLetter, mid uuid.UUID, txid string, offset int64, at time.Time) error {
	_, err := s.pool.Exec(ctx, `UPDATE queenside.dead_letters
		SET replayed_at = $3, replay_message_id = $4, replay_transaction_id = $5, replay_offset = $6
		WHERE partition_id = $1 AND id = $2`,
		d.PartitionID, d.ID, at, mid, txid, offset)
	if err != nil {
		return fmt.Errorf("dlq %d: record the replay: %w", d.ID, err)
	}
	return nil
}
