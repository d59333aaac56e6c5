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
FROM queenside.ack_call($1, $2, $3, $4, $5, $6, $7, $8)`

// ackCall is one call of queenside.ack_call: the leases named by the items
// (a slot each, from 1) and the items that name a lease that can exist.
type ackCall struct {
	groups, partitions []int64
	leases             []uuid.UUID
	leaseIDs           []string // as the client sent them, per slot
	sent               []int    // call position (from 0) -> index in the caller's slice
	slots              []int32
}

// ackThrough applies an ack call through q: the pool, where the statement
// is its own transaction, or a transaction it is part of.
func ackThrough(ctx context.Context, q querier, items []protocol.AckItem) (protocol.AckResult, error) {
	c, res := newAckCall(items)
	if len(c.sent) == 0 {
		return res, nil
	}
	rows, err := q.Query(ctx, ackSQL, c.args(items)...)
	if err != nil {
		return res, fmt.Errorf("ack: %w", err)
	}
	return c.finish(rows, res)
}

// newAckCall sorts an ack call's items into the leases they name, and
// answers at once the items naming a lease that cannot exist. The call has
// nothing to send when no item is left.
func newAckCall(items []protocol.AckItem) (*ackCall, protocol.AckResult) {
	res := protocol.AckResult{Results: make([]protocol.AckItemResult, len(items)), Leases: []protocol.LeaseState{}}
	c := &ackCall{}
	slotOf := map[string]int32{}
	for i, it := range items {
		res.Results[i] = protocol.AckItemResult{Index: i}
		slot, ok := slotOf[it.LeaseID]
		if !ok {
			ref, valid := parseLeaseID(it.LeaseID)
			if !valid { // no such lease was ever handed out: it is not live
				res.Results[i].Code = protocol.ItemLeaseExpired
				continue
			}
			c.groups, c.partitions = append(c.groups, ref.group), append(c.partitions, ref.partition)
			c.leases, c.leaseIDs = append(c.leases, ref.id), append(c.leaseIDs, it.LeaseID)
			slot = int32(len(c.leases))
			slotOf[it.LeaseID] = slot
		}
		c.sent = append(c.sent, i)
		c.slots = append(c.slots, slot)
	}
	return c, res
}

// finish reads the answer of ackSQL into res.
func (c *ackCall) finish(rows pgx.Rows, res protocol.AckResult) (protocol.AckResult, error) {
	states, err := c.read(rows, res.Results)
	if err != nil {
		return res, fmt.Errorf("ack: %w", err)
	}
	res.Leases = states
	return res, nil
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
	return []any{pgtype.FlatArray[int64](c.groups), pgtype.FlatArray[int64](c.partitions), pgtype.FlatArray[[16]byte](leases),
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
