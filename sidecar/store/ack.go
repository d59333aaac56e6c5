package store

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/queenside/queenside/protocol"
)

const ackSQL = `SELECT idx, success, code, dead_lettered, released, cursor_offset
FROM queenside.ack_call($1, $2, $3, $4, $5, $6, $7, $8, $9)`

// ackCall is one call of queenside.ack_call: the leases named by its items
// (a slot each, from 1), all on one shard, and the items.
type ackCall struct {
	route              *int64 // a partition of the call's shard, by which Citus routes it; nil on one PostgreSQL
	groups, partitions []int64
	leases             []uuid.UUID
	leaseIDs           []string // as the client sent them, per slot
	sent               []int    // call position (from 0) -> index in the caller's slice
	slots              []int32
}

// ackThrough applies an ack call in tx, a transaction it is part of: one
// call of ack_call a shard, in shard order.
func (s *Store) ackThrough(ctx context.Context, tx querier, items []protocol.AckItem) (protocol.AckResult, error) {
	calls, res, err := s.newAckCalls(ctx, items)
	for _, c := range calls {
		if err != nil {
			break
		}
		res, err = c.through(ctx, tx, items, res)
	}
	return sortLeases(res, len(calls)), err
}

// ack applies an ack call on its own: its one statement, or a statement a
// shard in one transaction; on Citus, each statement sent whole to its
// shard's worker and committed there (routedAcks).
func (s *Store) ack(ctx context.Context, items []protocol.AckItem) (res protocol.AckResult, err error) {
	calls, res, err := s.newAckCalls(ctx, items)
	switch {
	case err != nil || len(calls) == 0:
		return res, err
	case s.routed():
		done := 0
		res, failed, err := s.routedAcks(ctx, s.pool, items, calls, res, &done, func(int) int { return 0 })
		if err == nil {
			err = failed[0]
		}
		return res, err
	case len(calls) == 1:
		return calls[0].through(ctx, s.pool, items, res)
	}
	err = s.inTx(ctx, pgx.TxOptions{}, func(tx pgx.Tx) (err error) {
		for _, c := range calls {
			if res, err = c.through(ctx, tx, items, res); err != nil {
				return err
			}
		}
		return nil
	})
	return sortLeases(res, len(calls)), err
}

// through runs the call through q.
func (c *ackCall) through(ctx context.Context, q querier, items []protocol.AckItem, res protocol.AckResult) (protocol.AckResult, error) {
	rows, err := q.Query(ctx, ackSQL, c.args(items)...)
	if err != nil {
		return res, fmt.Errorf("ack: %w", err)
	}
	return c.finish(rows, res)
}

// newAckCalls sorts an ack call's items into calls of ack_call, one a
// shard of the leases' partitions in shard order (one on one PostgreSQL),
// and answers at once the items naming a lease that cannot exist. There is
// no call when no item is left.
func (s *Store) newAckCalls(ctx context.Context, items []protocol.AckItem) ([]*ackCall, protocol.AckResult, error) {
	res := protocol.AckResult{Results: make([]protocol.AckItemResult, len(items)), Leases: []protocol.LeaseState{}}
	var valid []int
	var partitions []int64
	for i, it := range items {
		res.Results[i] = protocol.AckItemResult{Index: i}
		ref, ok := parseLeaseID(it.LeaseID)
		if !ok { // no such lease was ever handed out: it is not live
			res.Results[i].Code = protocol.ItemLeaseExpired
			continue
		}
		valid = append(valid, i)
		partitions = append(partitions, ref.partition)
	}
	if len(valid) == 0 {
		return nil, res, nil
	}
	shards, err := s.shardsOf(ctx, partitions)
	if err != nil {
		return nil, res, fmt.Errorf("ack: %w", err)
	}
	var calls []*ackCall
	for _, positions := range byShard(shards) {
		sent := make([]int, len(positions))
		for k, p := range positions {
			sent[k] = valid[p]
		}
		c := newAckCall(items, sent)
		if s.routed() {
			c.route = &c.partitions[0]
		}
		calls = append(calls, c)
	}
	return calls, res, nil
}

// newAckCall is the call of the items at the given positions, whose lease
// ids are valid: each lease they name gets a slot.
func newAckCall(items []protocol.AckItem, sent []int) *ackCall {
	c := &ackCall{sent: sent, slots: make([]int32, len(sent))}
	slotOf := map[string]int32{}
	for k, i := range sent {
		id := items[i].LeaseID
		slot, ok := slotOf[id]
		if !ok {
			ref, _ := parseLeaseID(id)
			c.groups, c.partitions = append(c.groups, ref.group), append(c.partitions, ref.partition)
			c.leases, c.leaseIDs = append(c.leases, ref.id), append(c.leaseIDs, id)
			slot = int32(len(c.leases))
			slotOf[id] = slot
		}
		c.slots[k] = slot
	}
	return c
}

// finish reads the answer of ackSQL into res, adding the states of the
// call's leases to those of calls before.
func (c *ackCall) finish(rows pgx.Rows, res protocol.AckResult) (protocol.AckResult, error) {
	states, err := c.read(rows, res.Results)
	if err != nil {
		return res, fmt.Errorf("ack: %w", err)
	}
	res.Leases = append(res.Leases, states...)
	return res, nil
}

// sortLeases puts the lease states of an answer made of several calls in
// (group, partition) order, the order one call reports them in.
func sortLeases(res protocol.AckResult, calls int) protocol.AckResult {
	if calls > 1 {
		slices.SortStableFunc(res.Leases, func(a, b protocol.LeaseState) int {
			ra, _ := parseLeaseID(a.LeaseID)
			rb, _ := parseLeaseID(b.LeaseID)
			return cmp.Or(cmp.Compare(ra.group, rb.group), cmp.Compare(ra.partition, rb.partition))
		})
	}
	return res
}

func (c *ackCall) args(items []protocol.AckItem) []any {
	n := len(c.sent)
	offsets := make([]*int64, n)
	var hashes []*[16]byte // nil when every item names an offset
	failed := make([]bool, n)
	errs := make([]*string, n)
	for j, i := range c.sent {
		it := &items[i]
		if it.Offset != nil {
			offsets[j] = it.Offset
		} else {
			if hashes == nil {
				hashes = make([]*[16]byte, n)
			}
			h := [16]byte(TransactionHash(it.TransactionID))
			hashes[j] = &h
		}
		failed[j] = it.Status == protocol.AckFailed
		if it.Error != "" {
			errs[j] = &it.Error
		}
	}
	leases := make([][16]byte, len(c.leases))
	for i, l := range c.leases {
		leases[i] = l
	}
	return []any{c.route, pgtype.FlatArray[int64](c.groups), pgtype.FlatArray[int64](c.partitions), pgtype.FlatArray[[16]byte](leases),
		pgtype.FlatArray[int32](c.slots), pgtype.FlatArray[*int64](offsets), optionalArray(hashes),
		pgtype.FlatArray[bool](failed), pgtype.FlatArray[*string](errs)}
}

// read fills in the item results and returns the state of each lease that
// names a cursor (a lease id naming none has no state to report).
func (c *ackCall) read(rows pgx.Rows, out []protocol.AckItemResult) ([]protocol.LeaseState, error) {
	defer rows.Close()
	states := make([]protocol.LeaseState, len(c.leases))
	known := make([]bool, len(c.leases))
	answered := 0
	for rows.Next() {
		var (
			idx      int32
			r        protocol.AckItemResult
			code     *string
			released bool
			cursor   *int64
		)
		if err := rows.Scan(&idx, &r.Success, &code, &r.DeadLettered, &released, &cursor); err != nil {
			return nil, err
		}
		if idx < 1 || int(idx) > len(c.sent) {
			return nil, fmt.Errorf("answered position %d of %d", idx, len(c.sent))
		}
		r.Index = c.sent[idx-1]
		if code != nil {
			r.Code = *code
		}
		out[r.Index] = r
		answered++
		slot := c.slots[idx-1] - 1
		states[slot] = protocol.LeaseState{LeaseID: c.leaseIDs[slot], Released: released}
		if cursor != nil {
			states[slot].Cursor = *cursor
			known[slot] = true
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if answered != len(c.sent) {
		return nil, fmt.Errorf("answered %d items of %d", answered, len(c.sent))
	}
	live := []protocol.LeaseState{}
	for _, slot := range c.bySlotKey() {
		if known[slot] {
			live = append(live, states[slot])
		}
	}
	return live, nil
}

// bySlotKey returns the slots (from 0) in (group, partition) order, the
// order in which leases are reported.
func (c *ackCall) bySlotKey() []int {
	order := make([]int, len(c.leases))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Or(cmp.Compare(c.groups[a], c.groups[b]), cmp.Compare(c.partitions[a], c.partitions[b]))
	})
	return order
}
