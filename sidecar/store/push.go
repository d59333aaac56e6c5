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

const pushSQL = `SELECT base_offset, committed_at, dedup_on, dup_positions, dup_offsets, dup_message_ids, dup_committed_at
FROM queenside.push($1, $2, $3, $4, $5, $6, $7, $8)`

// partitionBatch is the part of a push that goes to one partition.
type partitionBatch struct {
	key     partitionKey
	id      int64
	indexes []int // positions in the caller's slice, in order
	// leaders[j] is the position (from 1) of the first message of the batch
	// with message j's hash; nil when no hash repeats.
	leaders []int32
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
		if err := readOutcomes(br, pb, msgs, out); err != nil {
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
	first := make(map[[16]byte]int32, n)
	for j, i := range pb.indexes {
		m := &msgs[i]
		hashes[j] = TransactionHash(m.TransactionID)
		if lead, seen := first[hashes[j]]; seen {
			if pb.leaders == nil {
				pb.leaders = make([]int32, n)
				for k := range j {
					pb.leaders[k] = int32(k + 1)
				}
			}
			pb.leaders[j] = lead
		} else {
			first[hashes[j]] = int32(j + 1)
			if pb.leaders != nil {
				pb.leaders[j] = int32(j + 1)
			}
		}
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
	return []any{pb.id, hashes, pb.leaders, ids, txids, payloads, traces, headers}
}

// readOutcomes turns push's one-row answer into an outcome per message:
// new messages took consecutive offsets from the base, in order; a message
// found stored already is a duplicate of its original; with deduplication
// on, a repeat inside the batch is a duplicate of the first message with
// its hash, whatever became of that one.
func readOutcomes(br pgx.BatchResults, pb *partitionBatch, msgs []Message, out []Outcome) error {
	var (
		base     int64
		at       time.Time
		dedupOn  bool
		dupPos   []int32
		dupOffs  []int64
		dupMids  [][16]byte
		dupTimes []time.Time
	)
	if err := br.QueryRow().Scan(&base, &at, &dedupOn, &dupPos, &dupOffs, &dupMids, &dupTimes); err != nil {
		return err
	}
	stored := make(map[int32]int, len(dupPos)) // position -> index in the dup arrays
	for k, p := range dupPos {
		stored[p] = k
	}
	next := base
	for j, i := range pb.indexes {
		pos := int32(j + 1)
		if dedupOn && pb.leaders != nil && pb.leaders[j] != pos {
			out[i] = out[pb.indexes[pb.leaders[j]-1]]
			out[i].Duplicate = true
			continue
		}
		if k, ok := stored[pos]; ok && dedupOn {
			out[i] = Outcome{Duplicate: true, Offset: dupOffs[k], MessageID: dupMids[k], CommittedAt: dupTimes[k]}
			continue
		}
		out[i] = Outcome{Offset: next, MessageID: msgs[i].MessageID, CommittedAt: at}
		next++
	}
	return nil
}
