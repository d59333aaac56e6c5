package store

import (
	"cmp"
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
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
FROM queenside.push($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`

// pushTx stores msgs in one PostgreSQL transaction, one statement unless
// mark is given, and returns an outcome per message in order. Either every
// message is decided or, on error, none is stored. A mark is recorded in
// the same transaction (PushReplay).
func (s *Store) pushTx(ctx context.Context, msgs []Message, mark *ReplayMark) (out []Outcome, err error) {
	err = againIfAborted(ctx, func() error {
		out, err = s.push(ctx, msgs, mark)
		if isNoData(err) { // a cached partition is gone
			s.parts.reset()
			out, err = s.push(ctx, msgs, mark)
		}
		return err
	})
	if err == nil {
		s.wakeRouted(msgs)
	}
	return out, err
}

// push stores msgs: in one statement, its own transaction, when they lie
// on one shard (always, on one PostgreSQL) and there is no mark;
// otherwise by a call a shard, and the mark, in one transaction.
func (s *Store) push(ctx context.Context, msgs []Message, mark *ReplayMark) ([]Outcome, error) {
	ids, shards, err := s.pushShards(ctx, msgs)
	if err != nil {
		return nil, err
	}
	if len(shards) == 1 && mark == nil {
		return s.pushThrough(ctx, s.pool, msgs, ids, shards)
	}
	var out []Outcome
	err = s.inTx(ctx, pgx.TxOptions{}, func(tx pgx.Tx) (err error) {
		out, err = s.pushThrough(ctx, tx, msgs, ids, shards)
		if err == nil && mark != nil {
			_, err = tx.Exec(ctx, markReplaySQL, mark.Segment, mark.End)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("push: %w", err)
	}
	return out, nil
}

// pushShards returns the id of each message's partition, creating
// partitions not yet made, and the positions of msgs grouped by the shard
// of their partition, in shard order (see byShard).
func (s *Store) pushShards(ctx context.Context, msgs []Message) ([]int64, [][]int, error) {
	keys := make([]partitionKey, len(msgs))
	for i := range msgs {
		keys[i] = partitionKey{msgs[i].Queue, msgs[i].Partition}
	}
	known, err := s.partitionIDs(ctx, keys)
	if err != nil {
		return nil, nil, err
	}
	ids := make([]int64, len(msgs))
	for i, k := range keys {
		ids[i] = known[k]
	}
	shards, err := s.shardsOf(ctx, ids)
	if err != nil {
		return nil, nil, err
	}
	return ids, byShard(shards), nil
}

// pushThrough stores msgs through q, the pool or a transaction: one call
// of queenside.push a shard, in shard order (q is a transaction when there
// are several). A shard's messages keep their order, and a partition's are
// all on its shard, so the outcomes are those of one call. A call routed
// to its shard's worker (Citus) notifies no one: the caller wakes the
// queues once it committed (wakeRouted).
func (s *Store) pushThrough(ctx context.Context, q querier, msgs []Message, ids []int64, shards [][]int) ([]Outcome, error) {
	out := make([]Outcome, len(msgs))
	for _, positions := range shards {
		part, partIDs := msgs, ids
		if len(shards) > 1 {
			part, partIDs = make([]Message, len(positions)), make([]int64, len(positions))
			for k, i := range positions {
				part[k], partIDs[k] = msgs[i], ids[i]
			}
		}
		call := newPushCall(part, partIDs)
		if s.routed() {
			call.route = &call.ids[0]
		}
		res, err := call.run(ctx, q, part, &s.dedup)
		if err != nil {
			return nil, err
		}
		for k, i := range positions {
			out[i] = res[k]
		}
	}
	return out, nil
}

// run stores the call's messages through q: the pool, where the statement
// is its own transaction, or a transaction it is part of.
func (c *pushCall) run(ctx context.Context, q querier, msgs []Message, dedup *dedupStates) ([]Outcome, error) {
	var r pushReply
	err := q.QueryRow(ctx, pushSQL, c.args(msgs)...).Scan(
		&r.at, &r.bases, &r.dedupOn, &r.dupPositions, &r.dupOffsets, &r.dupMessageIDs, &r.dupCommittedAt)
	if err != nil {
		return nil, fmt.Errorf("push: %w", err)
	}
	out, err := c.outcomes(msgs, r)
	if err == nil {
		for k, start := range c.starts {
			dedup.note(msgs[c.order[start-1]].Queue, r.dedupOn[k])
		}
	}
	return out, err
}

// dedupStates holds, for each queue a push stored messages in, whether it
// deduplicated then, as the database answered.
type dedupStates struct{ m sync.Map }

func (d *dedupStates) note(queue string, on bool) {
	if was, ok := d.m.Load(queue); !ok || was.(bool) != on {
		d.m.Store(queue, on)
	}
}

// Deduplicates tells whether queue deduplicated at the last push this
// store made to it; known is false before the first.
func (s *Store) Deduplicates(queue string) (on, known bool) {
	v, ok := s.dedup.m.Load(queue)
	if !ok {
		return false, false
	}
	return v.(bool), true
}

// pushCall is one call of queenside.push. The messages travel grouped by
// partition, in id order, each partition's in their original order, so
// that each partition's segment is a slice of the input arrays.
type pushCall struct {
	route   *int64  // a partition of the call's shard, by which Citus routes it; nil on one PostgreSQL
	order   []int   // call position (from 0) -> index in the caller's slice
	ids     []int64 // distinct partitions, in id order
	starts  []int32 // first call position (from 1) of each partition's run
	counts  []int32 // messages of each partition
	slots   []int32 // each message's partition, as an index (from 1) into ids
	hashes  [][16]byte
	leaders []int32 // see queenside.push; nil when nothing repeats
}

// newPushCall lays msgs out for a call, partition[i] being the id of
// msgs[i]'s partition.
func newPushCall(msgs []Message, partition []int64) *pushCall {
	n := len(msgs)
	c := &pushCall{order: make([]int, n), slots: make([]int32, n), hashes: make([][16]byte, n)}
	for i := range c.order {
		c.order[i] = i
	}
	slices.SortStableFunc(c.order, func(a, b int) int { return cmp.Compare(partition[a], partition[b]) })

	type firstKey struct {
		partition int64
		hash      [16]byte
	}
	first := make(map[firstKey]int32, n)
	for j, i := range c.order {
		pos := int32(j + 1)
		if k := len(c.ids); k == 0 || c.ids[k-1] != partition[i] {
			c.ids = append(c.ids, partition[i])
			c.starts = append(c.starts, pos)
			c.counts = append(c.counts, 0)
		}
		c.counts[len(c.counts)-1]++
		c.slots[j] = int32(len(c.ids))
		c.hashes[j] = TransactionHash(msgs[i].TransactionID)
		key := firstKey{partition[i], c.hashes[j]}
		lead, seen := first[key]
		if !seen {
			lead = pos
			first[key] = pos
		} else if c.leaders == nil {
			c.leaders = make([]int32, n)
			for p := range j {
				c.leaders[p] = int32(p + 1)
			}
		}
		if c.leaders != nil {
			c.leaders[j] = lead
		}
	}
	return c
}

func (c *pushCall) args(msgs []Message) []any {
	n := len(msgs)
	ids := make([][16]byte, n)
	txids := make([]string, n)
	payloads := make([][]byte, n)
	var traces []*string
	var headers [][]byte
	for j, i := range c.order {
		m := &msgs[i]
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
	return []any{c.route, c.ids, c.starts, c.counts, c.slots, c.hashes, c.leaders, ids, txids,
		pgtype.FlatArray[[]byte](payloads), optionalArray(traces), optionalArray(headers)}
}

// optionalArray passes a slice as an array parameter without pgx's
// reflection over its elements (its common-type fast path does not cover
// these); nil stays NULL.
func optionalArray[T any](s []T) any {
	if s == nil {
		return nil
	}
	return pgtype.FlatArray[T](s)
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
	stored := make(map[int32]int, len(r.dupPositions)) // call position -> index in the dup arrays
	for k, p := range r.dupPositions {
		stored[p] = k
	}
	next := slices.Clone(r.bases)
	byPos := make([]Outcome, len(msgs)) // by call position
	for j, i := range c.order {
		slot, pos := c.slots[j]-1, int32(j+1)
		switch k, isStored := stored[pos]; {
		case r.dedupOn[slot] && c.leaders != nil && c.leaders[j] != pos:
			byPos[j] = byPos[c.leaders[j]-1]
			byPos[j].Duplicate = true
		case r.dedupOn[slot] && isStored:
			byPos[j] = Outcome{Duplicate: true, Offset: r.dupOffsets[k], MessageID: r.dupMessageIDs[k], CommittedAt: r.dupCommittedAt[k]}
		default:
			byPos[j] = Outcome{Offset: next[slot], MessageID: msgs[i].MessageID, CommittedAt: r.at}
			next[slot]++
		}
	}
	out := make([]Outcome, len(msgs))
	for j, i := range c.order {
		out[i] = byPos[j]
	}
	return out, nil
}
