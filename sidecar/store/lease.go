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
	// The queue's lease time is read by a subquery, not joined: a stable
	// expression (now() + an interval) of a joined column is refused by
	// Citus in an UPDATE (SCALING.md, section 4, R4).
	return s.eachLease(ctx, leaseIDs, true, `
		UPDATE queenside.cursors c
		   SET lease_expires_at = greatest(c.lease_expires_at, now() + make_interval(secs => coalesce($4,
		           (SELECT q.lease_seconds FROM queenside.groups g JOIN queenside.queues q ON q.id = g.queue_id
		             WHERE g.id = $1))))
		 WHERE c.group_id = $1 AND c.partition_id = $2 AND c.lease_id = $3 AND c.lease_expires_at > now()
		RETURNING c.lease_expires_at`, secs)
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
	_, err := s.eachLease(ctx, ids, false, waking(`
		UPDATE queenside.cursors c
		   SET lease_id = NULL, lease_done = NULL,
		       delivered_to = CASE WHEN c.delivered_to[cardinality(c.delivered_to)] = c.lease_to
		                           THEN trim_array(c.delivered_to, 1) ELSE c.delivered_to END
		 WHERE c.group_id = $1 AND c.partition_id = $2 AND c.lease_id = $3`))
	return err
}

// Release gives live leases back without charging any retry budget: their
// unacked messages are deliverable again at once, and waiting pops are woken.
func (s *Store) Release(ctx context.Context, leaseIDs []string) ([]protocol.LeaseResult, error) {
	return s.eachLease(ctx, leaseIDs, false, waking(`
		UPDATE queenside.cursors c SET lease_id = NULL, lease_done = NULL
		 WHERE c.group_id = $1 AND c.partition_id = $2 AND c.lease_id = $3 AND c.lease_expires_at > now()`))
}

// waking makes an update of one lease's cursor a statement for eachLease
// that also wakes the pops waiting on its queue: what it frees is
// deliverable at once.
func waking(update string) string {
	return `WITH freed AS (` + update + `
		RETURNING c.group_id)
		SELECT now() FROM freed f
		  JOIN queenside.groups g ON g.id = f.group_id
		  JOIN queenside.queues q ON q.id = g.queue_id,
		       LATERAL queenside.wake(q.name)`
}

// eachLease runs sql (which returns one timestamp row for a live lease, none
// otherwise) for every lease id, in one transaction. With expiry, the
// timestamp is the lease's expiry and is reported.
func (s *Store) eachLease(ctx context.Context, leaseIDs []string, expiry bool, sql string, extra ...any) ([]protocol.LeaseResult, error) {
	out := make([]protocol.LeaseResult, len(leaseIDs))
	var b pgx.Batch
	var queued []int
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
	br := s.pool.SendBatch(ctx, &b)
	for _, i := range queued {
		var at time.Time
		err := br.QueryRow().Scan(&at)
		switch {
		case err == pgx.ErrNoRows:
		case err != nil:
			br.Close()
			return nil, fmt.Errorf("lease %s: %w", leaseIDs[i], err)
		default:
			out[i].Success, out[i].Code = true, ""
			if expiry {
				out[i].ExpiresAt = &at
			}
		}
	}
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("leases: commit: %w", err)
	}
	return out, nil
}
