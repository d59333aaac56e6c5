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

// PartitionBounds looks a partition up by its queue's name and its own.
// The name is resolved first, then the partition read by its id alone: on
// Citus that read goes to the partition's shard only.
func (s *Store) PartitionBounds(ctx context.Context, queue, partition string) (PartitionBounds, error) {
	var b PartitionBounds
	var id *int64
	err := s.pool.QueryRow(ctx, `
		SELECT q.id, n.id FROM queenside.queues q
		  LEFT JOIN queenside.partition_names n ON n.queue_id = q.id AND n.name = $2
		 WHERE q.name = $1`, queue, partition).Scan(&b.QueueID, &id)
	if errors.Is(err, pgx.ErrNoRows) {
		return b, fmt.Errorf("%w: %s", ErrQueueNotFound, queue)
	}
	if err != nil {
		return b, fmt.Errorf("partition %s of %s: %w", partition, queue, err)
	}
	if id == nil {
		return b, fmt.Errorf("%w: partition %q of %s", ErrPartitionNotFound, partition, queue)
	}
	b.ID = *id
	err = s.pool.QueryRow(ctx, `
		SELECT p.next_offset, coalesce((SELECT s.base_offset FROM queenside.segments s
		                                 WHERE s.partition_id = $1
		                                 ORDER BY s.last_offset LIMIT 1), p.next_offset)
		  FROM queenside.partitions p WHERE p.id = $1`, b.ID).Scan(&b.Head, &b.First)
	if err != nil {
		return b, fmt.Errorf("partition %s of %s: %w", partition, queue, err)
	}
	return b, nil
}

// OffsetAt is the first offset of partition committed at or after at (the
// head when none is): first_offset_at's binary search over segments_pkey.
func (s *Store) OffsetAt(ctx context.Context, partitionID int64, at time.Time) (int64, error) {
	var off int64
	if err := s.pool.QueryRow(ctx, "SELECT queenside.first_offset_at($1, $2)", partitionID, at).Scan(&off); err != nil {
		return 0, fmt.Errorf("offset at %s: %w", at.Format(time.RFC3339), err)
	}
	return off, nil
}

// pageSQL reads the messages of partition $1 from offset $2, at most $3,
// with the payloads of at most $4 bytes. The segments read are those whose
// last offset falls in the page and the one after (which may hold the
// page's end): two range scans of segments_pkey.
const pageSQL = `
SELECT greatest($2, s.base_offset) + u.i - 1, s.committed_at, u.mid, u.txid, u.trace, u.hdr,
       octet_length(u.payload), CASE WHEN octet_length(u.payload) <= $4 THEN u.payload END
  FROM (SELECT * FROM queenside.segments s
         WHERE s.partition_id = $1 AND s.last_offset >= $2 AND s.last_offset < $2 + $3
        UNION ALL
        (SELECT * FROM queenside.segments s
          WHERE s.partition_id = $1 AND s.last_offset >= $2 + $3
          ORDER BY s.last_offset LIMIT 1)) s
 CROSS JOIN LATERAL (SELECT greatest($2, s.base_offset) - s.base_offset + 1 AS lo,
                            least($2 + $3 - 1, s.last_offset) - s.base_offset + 1 AS hi) r
 CROSS JOIN LATERAL unnest(s.message_ids[r.lo:r.hi], s.transaction_ids[r.lo:r.hi], s.payloads[r.lo:r.hi],
                           s.trace_ids[r.lo:r.hi], s.headers[r.lo:r.hi]) WITH ORDINALITY AS u (mid, txid, payload, trace, hdr, i)
 WHERE s.base_offset < $2 + $3
 ORDER BY 1`

// Messages reads up to limit messages of a partition from offset from on,
// in offset order, with the payloads of at most maxPayload bytes.
func (s *Store) Messages(ctx context.Context, partitionID, from int64, limit, maxPayload int) ([]StoredMessage, error) {
	rows, err := s.pool.Query(ctx, pageSQL, partitionID, from, limit, maxPayload)
	if err != nil {
		return nil, fmt.Errorf("messages from %d: %w", from, err)
	}
	defer rows.Close()
	out := []StoredMessage{}
	for rows.Next() {
		var m StoredMessage
		var trace *string
		if err := rows.Scan(&m.Offset, &m.CommittedAt, &m.MessageID, &m.TransactionID, &trace, &m.Headers,
			&m.PayloadBytes, &m.Payload); err != nil {
			return nil, fmt.Errorf("messages from %d: %w", from, err)
		}
		if trace != nil {
			m.TraceID = *trace
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("messages from %d: %w", from, err)
	}
	return out, nil
}

// dedupSQL is the newest offset whose hash $2 partition $1 keeps, in
// either place a hash is stored: a dedup row (one probe of the dedup_key
// hash index) or the segment of one message that holds it (one probe of
// segments_hash).
const dedupSQL = `
SELECT max(k.msg_offset)
  FROM (SELECT d.msg_offset FROM queenside.dedup d
         WHERE uuid_hash_extended(d.hash, d.partition_id) = uuid_hash_extended($2, $1)
           AND d.partition_id = $1 AND d.hash = $2
        UNION ALL
        SELECT s.last_offset FROM queenside.segments s WHERE s.partition_id = $1 AND s.hash = $2) k
HAVING count(*) > 0`

// scanSQL is the newest offset of partition $1 from $3 on whose
// transaction id is $2: the segments from $3 on, their transaction ids
// only (payloads are not read).
const scanSQL = `
SELECT s.base_offset + u.i - 1
  FROM queenside.segments s
 CROSS JOIN LATERAL unnest(s.transaction_ids) WITH ORDINALITY AS u (txid, i)
 WHERE s.partition_id = $1 AND s.last_offset >= $3 AND u.txid = $2 AND s.base_offset + u.i - 1 >= $3
 ORDER BY 1 DESC LIMIT 1`

// FindTransaction finds the newest retained message of a partition with
// transaction id txid. The kept hashes answer for the messages of their
// window (an index probe); beyond it, the last scan messages are searched,
// newest first. byDedup says which answered.
func (s *Store) FindTransaction(ctx context.Context, b PartitionBounds, txid string, scan int64) (offset int64, found, byDedup bool, err error) {
	err = s.pool.QueryRow(ctx, dedupSQL, b.ID, TransactionHash(txid)).Scan(&offset)
	switch {
	case err == nil:
		// The hash is the id's, but the message may have been deleted by
		// retention since: it counts only when it is still there.
		msgs, err := s.Messages(ctx, b.ID, offset, 1, 0)
		if err != nil {
			return 0, false, false, err
		}
		if len(msgs) == 1 && msgs[0].Offset == offset && msgs[0].TransactionID == txid {
			return offset, true, true, nil
		}
	case !errors.Is(err, pgx.ErrNoRows):
		return 0, false, false, fmt.Errorf("find transaction: %w", err)
	}
	err = s.pool.QueryRow(ctx, scanSQL, b.ID, txid, max(b.Head-scan, b.First)).Scan(&offset)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, false, nil
	}
	if err != nil {
		return 0, false, false, fmt.Errorf("find transaction: %w", err)
	}
	return offset, true, false, nil
}

// GroupPosition reads a group's cursor and live lease in a partition.
func (s *Store) GroupPosition(ctx context.Context, b PartitionBounds, group string) (GroupPosition, error) {
	pos := GroupPosition{Group: group, Acked: []int64{}, Failures: map[int64]int{}}
	var groupID int64
	err := s.pool.QueryRow(ctx, "SELECT id FROM queenside.groups WHERE queue_id = $1 AND name = $2",
		b.QueueID, group).Scan(&groupID)
	if errors.Is(err, pgx.ErrNoRows) {
		return pos, fmt.Errorf("%w: %q", ErrGroupNotFound, group)
	}
	if err != nil {
		return pos, fmt.Errorf("group %q: %w", group, err)
	}
	var from, to *int64
	var failOffsets []int64
	var failCounts []int32
	err = s.pool.QueryRow(ctx, `
		SELECT `+cursorPosition+`, c.lease_id IS NOT NULL AND c.lease_expires_at > now(),
		       c.lease_from, c.lease_to, c.lease_expires_at, coalesce(c.lease_done, '{}'), c.fail_offsets, c.fail_counts
		  FROM queenside.cursors c
		  JOIN queenside.groups g ON g.id = c.group_id
		  JOIN queenside.partitions p ON p.id = c.partition_id
		 WHERE c.partition_id = $1 AND p.id = $1 AND c.group_id = $2`, b.ID, groupID).
		Scan(&pos.Cursor, &pos.Leased, &from, &to, &pos.LeaseExpiresAt, &pos.Acked, &failOffsets, &failCounts)
	if errors.Is(err, pgx.ErrNoRows) {
		return pos, fmt.Errorf("%w: %q has no cursor in this partition", ErrGroupNotFound, group)
	}
	if err != nil {
		return pos, fmt.Errorf("group %q: %w", group, err)
	}
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
