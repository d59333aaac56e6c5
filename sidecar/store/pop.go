package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/queenside/queenside/protocol"
)

// PopRequest is a validated pop.
type PopRequest struct {
	Queue        string
	Partition    string // "" for any
	Group        string // "" for queue mode
	Batch        int
	Partitions   int
	LeaseSeconds int // 0 for the queue's
	AutoAck      bool
	Mode         string
	From         *time.Time
}

const popSQL = `SELECT partition_id, partition_name, lease_id, lease_from, lease_to, lease_expires_at,
	head_attempts, seen_to, first_offset, committed_at, message_ids, transaction_ids, payloads, trace_ids, headers
FROM queenside.pop($1, $2, $3, $4, $5, $6)`

// ErrMessageTooLarge means the next message alone would not fit in a
// response frame: it cannot be delivered until the limit is raised.
var ErrMessageTooLarge = errors.New("store: message larger than the response limit")

// Pop delivers messages to a group in one transaction: see queenside.pop.
// The result must fit in maxBytes once encoded: the transaction commits
// only if it does, and is rolled back and retried with fewer messages if
// not, so a result too large to send never moves a cursor or holds a lease.
func (s *Store) Pop(ctx context.Context, r PopRequest, maxBytes int) (protocol.PopResult, error) {
	for {
		res, size, err := s.popOnce(ctx, r, maxBytes)
		if isNoData(err) { // a cached group or partition is gone
			s.groups.reset()
			s.parts.reset()
			res, size, err = s.popOnce(ctx, r, maxBytes)
		}
		if err != nil || size <= maxBytes {
			return res, err
		}
		if len(res.Messages) <= 1 {
			m := res.Messages[0]
			return protocol.PopResult{}, fmt.Errorf("%w: %s/%s offset %d needs about %d bytes, the limit is %d",
				ErrMessageTooLarge, m.Queue, m.Partition, m.Offset, size, maxBytes)
		}
		r.Batch = len(res.Messages) / 2
	}
}

// resultBound is an upper bound of the encoded size of a pop result: each
// message's variable fields plus a generous allowance for its keys and fixed
// fields, and as much for each lease and for the envelope.
func resultBound(res protocol.PopResult, headerBytes int) int {
	const perMessage, perLease, envelope = 320, 640, 1024
	n := envelope + headerBytes + perLease*len(res.Leases)
	for _, m := range res.Messages {
		n += perMessage + len(m.Payload) + len(m.Queue) + len(m.Partition) + len(m.TransactionID) + len(m.TraceID)
	}
	return n
}

func isNoData(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "P0002"
}

// popOnce runs one pop in an explicit transaction and commits it only if
// the result's size bound is within maxBytes.
func (s *Store) popOnce(ctx context.Context, r PopRequest, maxBytes int) (res protocol.PopResult, size int, err error) {
	res = protocol.PopResult{Messages: []protocol.Message{}, Leases: []protocol.Lease{}}
	ids, err := s.groupID(ctx, groupKey{r.Queue, r.Group}, r.Mode, r.From)
	if err != nil {
		return res, 0, err
	}
	var partition *int64
	if r.Partition != "" {
		id, err := s.partitionID(ctx, partitionKey{r.Queue, r.Partition})
		if err != nil {
			return res, 0, err
		}
		partition = &id
	}
	var leaseSeconds *int
	if r.LeaseSeconds > 0 {
		leaseSeconds = &r.LeaseSeconds
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return res, 0, fmt.Errorf("pop %s: %w", r.Queue, err)
	}
	// A connection left inside a transaction by an error is destroyed by
	// the pool on release, never reused.
	defer conn.Release()
	// BEGIN travels with the pop: one round trip, then COMMIT or ROLLBACK.
	var b pgx.Batch
	b.Queue("BEGIN")
	b.Queue(popSQL, ids.group, partition, r.Partitions, r.Batch, leaseSeconds, r.AutoAck)
	br := conn.SendBatch(ctx, &b)
	headerBytes, err := readPop(br, r, ids, &res)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return res, 0, fmt.Errorf("pop %s: %w", r.Queue, err)
	}
	size = resultBound(res, headerBytes)
	end := "COMMIT"
	if size > maxBytes {
		end = "ROLLBACK"
	}
	if _, err := conn.Exec(ctx, end); err != nil {
		return res, 0, fmt.Errorf("pop %s: %s: %w", r.Queue, strings.ToLower(end), err)
	}
	return res, size, nil
}

// readPop reads the rows of queenside.pop into res and returns the bytes of
// stored headers seen. Each row is a run of one segment's messages.
func readPop(br pgx.BatchResults, r PopRequest, ids groupIDs, res *protocol.PopResult) (headerBytes int, err error) {
	if _, err := br.Exec(); err != nil { // BEGIN
		return 0, err
	}
	rows, err := br.Query()
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	lastPartition := int64(-1)
	var leaseID string
	for rows.Next() {
		var (
			pid         int64
			pname       string
			lease       *[16]byte
			from, to    *int64
			expires     *time.Time
			attempts    *int32
			seenTo      int64
			first       int64
			committedAt time.Time
			mids        [][16]byte
			txids       []string
			payloads    [][]byte
			traces      []*string
			headers     [][]byte
		)
		if err := rows.Scan(&pid, &pname, &lease, &from, &to, &expires, &attempts, &seenTo,
			&first, &committedAt, &mids, &txids, &payloads, &traces, &headers); err != nil {
			return headerBytes, err
		}
		if pid != lastPartition {
			lastPartition, leaseID = pid, ""
			if lease != nil {
				leaseID = leaseRef{group: ids.group, partition: pid, id: *lease}.String()
				res.Leases = append(res.Leases, protocol.Lease{
					LeaseID: leaseID, Queue: r.Queue, Partition: pname, Group: r.Group,
					FromOffset: *from, ToOffset: *to, ExpiresAt: *expires, HeadAttempts: int(*attempts),
				})
			}
		}
		if len(txids) != len(mids) || len(payloads) != len(mids) {
			return headerBytes, fmt.Errorf("segment of %s at %d has arrays of %d, %d and %d", pname, first, len(mids), len(txids), len(payloads))
		}
		for i := range mids {
			m := protocol.Message{
				Queue: r.Queue, Partition: pname, Offset: first + int64(i),
				MessageID: uuid.UUID(mids[i]).String(), TransactionID: txids[i], Payload: payloads[i],
				CommittedAt: committedAt, LeaseID: leaseID,
			}
			m.Redelivered = m.Offset <= seenTo
			if i < len(traces) && traces[i] != nil {
				m.TraceID = *traces[i]
			}
			if i < len(headers) && headers[i] != nil {
				headerBytes += len(headers[i])
				if err := msgpack.Unmarshal(headers[i], &m.Headers); err != nil {
					return headerBytes, fmt.Errorf("stored headers of offset %d: %w", m.Offset, err)
				}
			}
			res.Messages = append(res.Messages, m)
		}
	}
	return headerBytes, rows.Err()
}
