package store

import (
	"cmp"
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Message is one item to store, validated and given its identity.
type Message struct {
	Queue         string
	Partition     string
	Payload       []byte // exact msgpack encoding
	TransactionID string
	MessageID     uuid.UUID
	TraceID       string
	Headers       []byte // msgpack map; nil when none
}

// Outcome is the verdict on one message. For a duplicate, Offset, MessageID
// and CommittedAt are the original's.
type Outcome struct {
	Duplicate   bool
	Offset      int64
	MessageID   uuid.UUID
	CommittedAt time.Time
}

// TransactionHash is a message's identity: the first 128 bits of the SHA-256
// of its transaction id. Every verdict in the system compares these.
func TransactionHash(transactionID string) uuid.UUID {
	sum := sha256.Sum256([]byte(transactionID))
	return uuid.UUID(sum[:16])
}

const pushSQL = `SELECT idx, duplicate, msg_offset, message_id, committed_at
FROM queenside.push($1, $2, $3, $4, $5, $6, $7)`

// partitionBatch is the part of a push that goes to one partition.
type partitionBatch struct {
	key     partitionKey
	id      int64
	indexes []int // positions in the caller's slice, in order
}

// pushTx stores msgs in one PostgreSQL transaction, one round trip, and
// returns an outcome per message in order. Partitions are locked in id order
// so two pushes can never deadlock. Either every message is decided or, on
// error, none is stored.
func (s *Store) pushTx(ctx context.Context, msgs []Message) ([]Outcome, error) {
	out, err := s.push(ctx, msgs)
	if isNoData(err) { // a cached partition is gone
		s.parts.reset()
		out, err = s.push(ctx, msgs)
	}
	return out, err
}

func (s *Store) push(ctx context.Context, msgs []Message) ([]Outcome, error) {
	batches, err := s.splitByPartition(ctx, msgs)
	if err != nil {
		return nil, err
	}
	var b pgx.Batch
	for _, pb := range batches {
		b.Queue(pushSQL, pushArgs(pb, msgs)...)
	}
	out := make([]Outcome, len(msgs))
	br := s.pool.SendBatch(ctx, &b)
	for _, pb := range batches {
		if err := readOutcomes(br, pb, out); err != nil {
			br.Close()
			return nil, fmt.Errorf("push to %s/%s: %w", pb.key.queue, pb.key.partition, err)
		}
	}
	// The batch is one implicit transaction that commits at its end: only a
	// clean close means the outcomes above are durable.
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("push: commit: %w", err)
	}
	return out, nil
}

func (s *Store) splitByPartition(ctx context.Context, msgs []Message) ([]*partitionBatch, error) {
	byKey := make(map[partitionKey]*partitionBatch)
	var batches []*partitionBatch
	for i, m := range msgs {
		k := partitionKey{m.Queue, m.Partition}
		pb := byKey[k]
		if pb == nil {
			id, err := s.partitionID(ctx, k)
			if err != nil {
				return nil, err
			}
			pb = &partitionBatch{key: k, id: id}
			byKey[k] = pb
			batches = append(batches, pb)
		}
		pb.indexes = append(pb.indexes, i)
	}
	slices.SortFunc(batches, func(a, b *partitionBatch) int { return cmp.Compare(a.id, b.id) })
	return batches, nil
}

func pushArgs(pb *partitionBatch, msgs []Message) []any {
	n := len(pb.indexes)
	hashes := make([][16]byte, n)
	ids := make([][16]byte, n)
	txids := make([]string, n)
	payloads := make([][]byte, n)
	var traces []*string
	var headers [][]byte
	for j, i := range pb.indexes {
		m := &msgs[i]
		hashes[j] = TransactionHash(m.TransactionID)
		ids[j] = m.MessageID
		txids[j] = m.TransactionID
		payloads[j] = m.Payload
		if m.TraceID != "" {
			if traces == nil {
				traces = make([]*string, n)
			}
			traces[j] = &m.TraceID
		}
		if m.Headers != nil {
			if headers == nil {
				headers = make([][]byte, n)
			}
			headers[j] = m.Headers
		}
	}
	return []any{pb.id, hashes, ids, txids, payloads, traces, headers}
}

func readOutcomes(br pgx.BatchResults, pb *partitionBatch, out []Outcome) error {
	rows, err := br.Query()
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			idx int32
			o   Outcome
			mid [16]byte
		)
		if err := rows.Scan(&idx, &o.Duplicate, &o.Offset, &mid, &o.CommittedAt); err != nil {
			return err
		}
		if idx < 1 || int(idx) > len(pb.indexes) {
			return fmt.Errorf("push returned position %d of %d", idx, len(pb.indexes))
		}
		o.MessageID = mid
		out[pb.indexes[idx-1]] = o
	}
	return rows.Err()
}
