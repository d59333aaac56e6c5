package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// The message browser: a partition's stored messages a page at a time,
// read-only. Every read is bounded by its page: the segments covering the
// page's offsets are found through segments_pkey (partition_id,
// last_offset) and only the page's slice of their arrays is unnested, so a
// page of a partition of millions costs what a page of a small one does.
// Nothing here takes a lock or writes: a cursor or a lease is never moved.

// ErrGroupNotFound is returned for a group the queue does not have.
var ErrGroupNotFound = errors.New("store: group not found")

// PartitionBounds is a partition's id and the offsets it holds: First is
// the first retained (Head when none is), Head the next to be stored.
type PartitionBounds struct {
	ID, QueueID int64
	First, Head int64
}

// StoredMessage is one message as stored. Payload is nil when it is larger
// than the bound it was read with; PayloadBytes is its size all the same.
type StoredMessage struct {
	Offset        int64
	MessageID     uuid.UUID
	TransactionID string
	CommittedAt   time.Time
	TraceID       string
	Headers       []byte // msgpack map, nil when none
	Payload       []byte
	PayloadBytes  int
	Producer      string // the role that pushed it; "" for messages stored before version 28
}

// GroupPosition is a group's cursor in one partition and its live lease:
// the offsets below Cursor are consumed; LeaseFrom..LeaseTo are leased
// when Leased, Acked among them acked already (the cursor waits for an
// earlier one). Failures counts the failed deliveries of offsets not
// consumed yet.
type GroupPosition struct {
	Group          string
	Cursor         int64
	Leased         bool
	LeaseFrom      int64
	LeaseTo        int64
	LeaseExpiresAt *time.Time
	Acked          []int64
	Failures       map[int64]int
}

// PartitionBounds looks a partition up by its queue's name and its own
// (queenside.partition_bounds, which needs read on the queue).
func (s *Store) PartitionBounds(ctx context.Context, queue, partition string) (PartitionBounds, error) {
	var b PartitionBounds
	var id, first, head *int64
	err := s.pool.QueryRow(ctx, "SELECT o_queue_id, o_partition_id, o_first, o_head FROM queenside.partition_bounds($1, $2)",
		queue, partition).Scan(&b.QueueID, &id, &first, &head)
	if errors.Is(err, pgx.ErrNoRows) {
		return b, fmt.Errorf("%w: %s", ErrQueueNotFound, queue)
	}
	if err != nil {
		return b, fmt.Errorf("partition %s of %s: %w", partition, queue, err)
	}
	if id == nil {
		return b, fmt.Errorf("%w: partition %q of %s", ErrPartitionNotFound, partition, queue)
	}
	if first == nil || head == nil {
		return b, fmt.Errorf("partition %s of %s: %w", partition, queue, pgx.ErrNoRows)
	}
	b.ID, b.First, b.Head = *id, *first, *head
	return b, nil
}

// OffsetAt is the first offset of partition committed at or after at (the
// head when none is): first_offset_at's binary search over segments_pkey
// (queenside.offset_at, which needs read on the partition's queue).
func (s *Store) OffsetAt(ctx context.Context, partitionID int64, at time.Time) (int64, error) {
	var off int64
	if err := s.pool.QueryRow(ctx, "SELECT queenside.offset_at($1, $2)", partitionID, at).Scan(&off); err != nil {
		return 0, fmt.Errorf("offset at %s: %w", at.Format(time.RFC3339), err)
	}
	return off, nil
}

// Messages reads up to limit messages of a partition from offset from on,
// in offset order, with the payloads of at most maxPayload bytes
// (queenside.message_page, which needs read on the partition's queue):
// the segments whose last offset falls in the page and the one after, two
// range scans of segments_pkey (browse_test.go checks the plans).
func (s *Store) Messages(ctx context.Context, partitionID, from int64, limit, maxPayload int) ([]StoredMessage, error) {
	rows, err := s.pool.Query(ctx, `SELECT o_offset, o_committed_at, o_message_id, o_transaction_id, o_trace_id,
		o_headers, o_payload_bytes, o_payload, o_producer FROM queenside.message_page($1, $2, $3, $4)`, partitionID, from, limit, maxPayload)
	if err != nil {
		return nil, fmt.Errorf("messages from %d: %w", from, err)
	}
	defer rows.Close()
	out := []StoredMessage{}
	for rows.Next() {
		var m StoredMessage
		var trace, producer *string
		if err := rows.Scan(&m.Offset, &m.CommittedAt, &m.MessageID, &m.TransactionID, &trace, &m.Headers,
			&m.PayloadBytes, &m.Payload, &producer); err != nil {
			return nil, fmt.Errorf("messages from %d: %w", from, err)
		}
		if trace != nil {
			m.TraceID = *trace
		}
		if producer != nil {
			m.Producer = *producer
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("messages from %d: %w", from, err)
	}
	return out, nil
}

// FindTransaction finds the newest retained message of a partition with
// transaction id txid. The kept hashes answer for the messages of their
// window (an index probe); beyond it, the last scan messages are searched,
// newest first. byDedup says which answered (queenside.find_transaction,
// which needs read on the partition's queue).
func (s *Store) FindTransaction(ctx context.Context, b PartitionBounds, txid string, scan int64) (offset int64, found, byDedup bool, err error) {
	var off *int64
	err = s.pool.QueryRow(ctx, "SELECT o_offset, o_by_dedup FROM queenside.find_transaction($1, $2, $3)",
		b.ID, txid, max(b.Head-scan, b.First)).Scan(&off, &byDedup)
	if err != nil {
		return 0, false, false, fmt.Errorf("find transaction: %w", err)
	}
	if off == nil {
		return 0, false, false, nil
	}
	return *off, true, byDedup, nil
}

// GroupPosition reads a group's cursor and live lease in a partition
// (queenside.group_position, which needs read on the partition's queue).
func (s *Store) GroupPosition(ctx context.Context, b PartitionBounds, group string) (GroupPosition, error) {
	pos := GroupPosition{Group: group, Acked: []int64{}, Failures: map[int64]int{}}
	var groupID, cursor *int64
	var leased *bool
	var from, to *int64
	var acked, failOffsets []int64
	var failCounts []int32
	err := s.pool.QueryRow(ctx, `SELECT o_group_id, o_cursor, o_leased, o_lease_from, o_lease_to, o_lease_expires_at,
		o_acked, o_fail_offsets, o_fail_counts FROM queenside.group_position($1, $2)`, b.ID, group).
		Scan(&groupID, &cursor, &leased, &from, &to, &pos.LeaseExpiresAt, &acked, &failOffsets, &failCounts)
	if errors.Is(err, pgx.ErrNoRows) {
		return pos, fmt.Errorf("%w: %q", ErrGroupNotFound, group)
	}
	if err != nil {
		return pos, fmt.Errorf("group %q: %w", group, err)
	}
	if cursor == nil {
		return pos, fmt.Errorf("%w: %q has no cursor in this partition", ErrGroupNotFound, group)
	}
	pos.Cursor, pos.Leased, pos.Acked = *cursor, leased != nil && *leased, acked
	if pos.Leased && from != nil && to != nil {
		pos.LeaseFrom, pos.LeaseTo = *from, *to
	} else {
		pos.Leased, pos.LeaseExpiresAt, pos.Acked = false, nil, []int64{}
	}
	for i, o := range failOffsets {
		if i < len(failCounts) && o >= pos.Cursor {
			pos.Failures[o] = int(failCounts[i])
		}
	}
	return pos, nil
}
