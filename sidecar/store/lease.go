package store

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queenside/queenside/protocol"
)

// Renew extends live leases to seconds from now (the queue's lease time when
// 0); an expiry never moves earlier.
func (s *Store) Renew(ctx context.Context, leaseIDs []string, seconds int) ([]protocol.LeaseResult, error) {
	var secs *int
	if seconds > 0 {
		secs = &seconds
	}
	return s.eachLease(ctx, leaseIDs, renewing, `SELECT * FROM queenside.renew_lease($1, $2, $3, $4)`, secs)
}

// withdraw takes back the leases of pop results that were committed but
// will not be sent (a result too large for its response): each cursor is
// left as if the pop had not leased it, the delivery it counted included,
// so a message that was never received is not one delivery nearer its
// maxDeliveries. The leases are taken in (partition, group) order, as acks
// take theirs, so that the two cannot deadlock.
func (s *Store) withdraw(ctx context.Context, results []protocol.PopResult) error {
	var ids []string
	for _, r := range results {
		for _, l := range r.Leases {
			ids = append(ids, l.LeaseID)
		}
	}
	slices.SortFunc(ids, func(a, b string) int {
		ra, _ := parseLeaseID(a)
		rb, _ := parseLeaseID(b)
		return cmp.Or(cmp.Compare(ra.partition, rb.partition), cmp.Compare(ra.group, rb.group))
	})
	if len(ids) == 0 {
		return nil
	}
	_, err := s.eachLease(ctx, ids, freeing, `SELECT * FROM queenside.withdraw_lease($1, $2, $3)`)
	return err
}

// Release gives live leases back without charging any retry budget: their
// unacked messages are deliverable again at once, and waiting pops are woken.
func (s *Store) Release(ctx context.Context, leaseIDs []string) ([]protocol.LeaseResult, error) {
	return s.eachLease(ctx, leaseIDs, freeing, `SELECT * FROM queenside.release_lease($1, $2, $3)`)
}

// What a statement of eachLease does to a live lease, and returns for it.
type leaseChange int

const (
	renewing leaseChange = iota // extends it; returns its expiry
	freeing                     // ends it; returns its queue's name, whose waiting pops are woken
)

// eachLease runs sql for every lease id, in one transaction; sql returns
// one row for a live lease, none otherwise. Pops waiting on the queues of
// the leases a freeing statement ended are woken by a notification of
// their own, sent on no table and in the same transaction: on Citus a
// statement on a table may run on another node, where no sidecar listens.
func (s *Store) eachLease(ctx context.Context, leaseIDs []string, change leaseChange, sql string, extra ...any) ([]protocol.LeaseResult, error) {
	out := make([]protocol.LeaseResult, len(leaseIDs))
	var b pgx.Batch
	var queued []int
	if change == freeing {
		b.Queue("BEGIN")
	}
	for i, id := range leaseIDs {
		out[i] = protocol.LeaseResult{LeaseID: id, Code: protocol.ItemLeaseExpired}
		ref, ok := parseLeaseID(id)
		if !ok {
			continue
		}
		b.Queue(sql, append([]any{ref.group, ref.partition, ref.id}, extra...)...)
		queued = append(queued, i)
	}
	if len(queued) == 0 {
		return out, nil
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("leases: %w", err)
	}
	defer s.release(ctx, conn)
	br := conn.SendBatch(ctx, &b)
	var woken []string
	err = func() error {
		if change == freeing {
			if _, err := br.Exec(); err != nil { // BEGIN
				return err
			}
		}
		for _, i := range queued {
			var at time.Time
			var queue string
			row := br.QueryRow()
			var err error
			if change == renewing {
				err = row.Scan(&at)
			} else {
				err = row.Scan(&queue)
			}
			switch {
			case err == pgx.ErrNoRows:
			case err != nil:
				return fmt.Errorf("lease %s: %w", leaseIDs[i], err)
			default:
				out[i].Success, out[i].Code = true, ""
				if change == renewing {
					out[i].ExpiresAt = &at
				} else if !slices.Contains(woken, queue) {
					woken = append(woken, queue)
				}
			}
		}
		return nil
	}()
	if cerr := br.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("leases: commit: %w", cerr)
	}
	if change == freeing { // the wake-ups and the end, in one round trip
		var end pgx.Batch
		switch {
		case err != nil:
			end.Queue("ROLLBACK")
		case len(woken) > 0:
			end.Queue("SELECT pg_notify($1, q) FROM unnest($2::text[]) AS q", WakeChannel, woken)
			fallthrough
		default:
			end.Queue("COMMIT")
		}
		if eerr := conn.SendBatch(ctx, &end).Close(); err == nil && eerr != nil {
			err = fmt.Errorf("leases: commit: %w", eerr)
		}
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}
