package store

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/queenside/queenside/protocol"
)

const ackSQL = `SELECT idx, success, code, dead_lettered, released, cursor_offset
FROM queenside.ack($1, $2, $3, $4, $5, $6, $7)`

// leaseAck is the part of an ack call that names one lease.
type leaseAck struct {
	leaseID string
	ref     leaseRef
	indexes []int
}

// Ack applies an ack call in one transaction: one cursor update per lease,
// leases locked in (group, partition) order so two calls cannot deadlock.
func (s *Store) Ack(ctx context.Context, items []protocol.AckItem) (protocol.AckResult, error) {
	return ackThrough(ctx, s.pool, items)
}

// ackThrough applies an ack call through q: the pool, where the batch is
// one implicit transaction, or a transaction it is part of.
func ackThrough(ctx context.Context, q querier, items []protocol.AckItem) (protocol.AckResult, error) {
	res := protocol.AckResult{Results: make([]protocol.AckItemResult, len(items)), Leases: []protocol.LeaseState{}}
	byLease := map[string]*leaseAck{}
	var acks []*leaseAck
	for i, it := range items {
		res.Results[i] = protocol.AckItemResult{Index: i}
		la := byLease[it.LeaseID]
		if la == nil {
			ref, ok := parseLeaseID(it.LeaseID)
			if !ok { // no such lease was ever handed out: it is not live
				res.Results[i].Code = protocol.ItemLeaseExpired
				continue
			}
			la = &leaseAck{leaseID: it.LeaseID, ref: ref}
			byLease[it.LeaseID] = la
			acks = append(acks, la)
		}
		la.indexes = append(la.indexes, i)
	}
	if len(acks) == 0 {
		return res, nil
	}
	slices.SortFunc(acks, func(a, b *leaseAck) int {
		return cmp.Or(cmp.Compare(a.ref.group, b.ref.group), cmp.Compare(a.ref.partition, b.ref.partition))
	})
	var b pgx.Batch
	for _, la := range acks {
		b.Queue(ackSQL, ackArgs(la, items)...)
	}
	br := q.SendBatch(ctx, &b)
	states := make([]protocol.LeaseState, 0, len(acks))
	for _, la := range acks {
		st, known, err := readAckResults(br, la, res.Results)
		if err != nil {
			br.Close()
			return res, fmt.Errorf("ack lease %s: %w", la.leaseID, err)
		}
		if known {
			states = append(states, st)
		}
	}
	if err := br.Close(); err != nil {
		return res, fmt.Errorf("ack: commit: %w", err)
	}
	res.Leases = states
	return res, nil
}

func ackArgs(la *leaseAck, items []protocol.AckItem) []any {
	n := len(la.indexes)
	offsets := make([]*int64, n)
	var hashes []*[16]byte // nil when every item names an offset
	failed := make([]bool, n)
	errs := make([]*string, n)
	for j, i := range la.indexes {
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
	return []any{la.ref.group, la.ref.partition, la.ref.id, offsets, hashes, failed, errs}
}

// readAckResults fills in one lease's item results. known is false when
// the lease names no cursor at all: then there is no state to report.
func readAckResults(br pgx.BatchResults, la *leaseAck, out []protocol.AckItemResult) (st protocol.LeaseState, known bool, err error) {
	st = protocol.LeaseState{LeaseID: la.leaseID}
	rows, err := br.Query()
	if err != nil {
		return st, false, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			idx      int32
			r        protocol.AckItemResult
			code     *string
			released bool
			cursor   *int64
		)
		if err := rows.Scan(&idx, &r.Success, &code, &r.DeadLettered, &released, &cursor); err != nil {
			return st, false, err
		}
		if idx < 1 || int(idx) > len(la.indexes) {
			return st, false, fmt.Errorf("ack returned position %d of %d", idx, len(la.indexes))
		}
		r.Index = la.indexes[idx-1]
		if code != nil {
			r.Code = *code
		}
		out[r.Index] = r
		st.Released = released
		if cursor != nil {
			st.Cursor = *cursor
			known = true
		}
	}
	return st, known, rows.Err()
}
