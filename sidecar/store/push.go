package store

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
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

const pushSQL = `SELECT committed_at, bases, dedup_on, dup_positions, dup_offsets, dup_message_ids, dup_committed_at
FROM queenside.push($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`

// pushTx stores msgs in one PostgreSQL transaction, one statement, and
// returns an outcome per message in order. Either every message is decided
// or, on error, none is stored.
func (s *Store) pushTx(ctx context.Context, msgs []Message) ([]Outcome, error) {
	out, err := s.push(ctx, msgs)
	if isNoData(err) { // a cached partition is gone
		s.parts.reset()
		out, err = s.push(ctx, msgs)
	}
	return out, err
}

func (s *Store) push(ctx context.Context, msgs []Message) ([]Outcome, error) {
	call, err := s.newPushCall(ctx, msgs)
	if err != nil {
		return nil, err
	}
	var r pushReply
	err = s.pool.QueryRow(ctx, pushSQL, call.args(msgs)...).Scan(
		&r.at, &r.bases, &r.dedupOn, &r.dupPositions, &r.dupOffsets, &r.dupMessageIDs, &r.dupCommittedAt)
	if err != nil {
		return nil, fmt.Errorf("push: %w", err)
	}
	return call.outcomes(msgs, r)
}

// pushCall is one call of queenside.push: the partitions of the messages,
// in id order, and which message repeats which inside a partition.
type pushCall struct {
	ids        []int64       // distinct partitions, in id order
	counts     []int32       // messages of each
	slot       map[int64]int // partition id -> index in ids
	partitions []int64       // each message's partition
	hashes     [][16]byte    // each message's identity
	leaders    []int32       // see queenside.push; nil when nothing repeats
}

func (s *Store) newPushCall(ctx context.Context, msgs []Message) (*pushCall, error) {
	c := &pushCall{
		slot:       make(map[int64]int),
		partitions: make([]int64, len(msgs)),
		hashes:     make([][16]byte, len(msgs)),
	}
	type firstKey struct {
		partition int64
		hash      [16]byte
	}
	first := make(map[firstKey]int32, len(msgs))
	for i := range msgs {
		id, err := s.partitionID(ctx, partitionKey{msgs[i].Queue, msgs[i].Partition})
		if err != nil {
			return nil, err
		}
		c.partitions[i] = id
		if _, ok := c.slot[id]; !ok {
			c.slot[id] = -1
			c.ids = append(c.ids, id)
		}
		c.hashes[i] = TransactionHash(msgs[i].TransactionID)
		k := firstKey{id, c.hashes[i]}
		lead, seen := first[k]
		if !seen {
			lead = int32(i + 1)
			first[k] = lead
		}
		if seen && c.leaders == nil {
			c.leaders = make([]int32, len(msgs))
			for j := range i {
				c.leaders[j] = int32(j + 1)
			}
		}
		if c.leaders != nil {
			c.leaders[i] = lead
		}
	}
	slices.Sort(c.ids)
	c.counts = make([]int32, len(c.ids))
	for k, id := range c.ids {
		c.slot[id] = k
	}
	for _, id := range c.partitions {
		c.counts[c.slot[id]]++
	}
	return c, nil
}

func (c *pushCall) args(msgs []Message) []any {
	n := len(msgs)
	ids := make([][16]byte, n)
	txids := make([]string, n)
	payloads := make([][]byte, n)
	var traces []*string
	var headers [][]byte
	for i := range msgs {
		m := &msgs[i]
		ids[i] = m.MessageID
		txids[i] = m.TransactionID
		payloads[i] = m.Payload
		if m.TraceID != "" {
			if traces == nil {
				traces = make([]*string, n)
			}
			traces[i] = &m.TraceID
		}
		if m.Headers != nil {
			if headers == nil {
				headers = make([][]byte, n)
			}
			headers[i] = m.Headers
		}
	}
	return []any{c.ids, c.counts, c.partitions, c.hashes, c.leaders, ids, txids, payloads, traces, headers}
}

// pushReply is queenside.push's one-row answer.
type pushReply struct {
	at             time.Time
	bases          []int64 // per partition of the call
	dedupOn        []bool  // per partition of the call
	dupPositions   []int32
	dupOffsets     []int64
	dupMessageIDs  [][16]byte
	dupCommittedAt []time.Time
}

// outcomes turns the answer into an outcome per message: new messages took
// consecutive offsets of their partition from its base, in order; a
// message found stored already is a duplicate of its original; with
// deduplication on, a repeat inside a partition is a duplicate of the first
// message with its hash, whatever became of that one.
func (c *pushCall) outcomes(msgs []Message, r pushReply) ([]Outcome, error) {
	if len(r.bases) != len(c.ids) || len(r.dedupOn) != len(c.ids) {
		return nil, fmt.Errorf("push: answered %d partitions of %d", len(r.bases), len(c.ids))
	}
	stored := make(map[int32]int, len(r.dupPositions)) // position -> index in the dup arrays
	for k, p := range r.dupPositions {
		stored[p] = k
	}
	next := slices.Clone(r.bases)
	out := make([]Outcome, len(msgs))
	for i := range msgs {
		slot := c.slot[c.partitions[i]]
		pos := int32(i + 1)
		switch k, isStored := stored[pos]; {
		case r.dedupOn[slot] && c.leaders != nil && c.leaders[i] != pos:
			out[i] = out[c.leaders[i]-1]
			out[i].Duplicate = true
		case r.dedupOn[slot] && isStored:
			out[i] = Outcome{Duplicate: true, Offset: r.dupOffsets[k], MessageID: r.dupMessageIDs[k], CommittedAt: r.dupCommittedAt[k]}
		default:
			out[i] = Outcome{Offset: next[slot], MessageID: msgs[i].MessageID, CommittedAt: r.at}
			next[slot]++
		}
	}
	return out, nil
}
