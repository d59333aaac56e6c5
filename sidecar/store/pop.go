package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
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
	head_attempts, msg_offset, message_id, transaction_id, payload, committed_at, trace_id, headers, redelivered
FROM queenside.pop($1, $2, $3, $4, $5, $6)`

// Pop delivers messages to a group in one transaction: see queenside.pop.
func (s *Store) Pop(ctx context.Context, r PopRequest) (protocol.PopResult, error) {
	res, err := s.pop(ctx, r)
	if isNoData(err) { // a cached group or partition is gone
		s.groups.reset()
		s.parts.reset()
		res, err = s.pop(ctx, r)
	}
	return res, err
}

func isNoData(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "P0002"
}

func (s *Store) pop(ctx context.Context, r PopRequest) (protocol.PopResult, error) {
	res := protocol.PopResult{Messages: []protocol.Message{}, Leases: []protocol.Lease{}}
	ids, err := s.groupID(ctx, groupKey{r.Queue, r.Group}, r.Mode, r.From)
	if err != nil {
		return res, err
	}
	var partition *int64
	if r.Partition != "" {
		id, err := s.partitionID(ctx, partitionKey{r.Queue, r.Partition})
		if err != nil {
			return res, err
		}
		partition = &id
	}
	var leaseSeconds *int
	if r.LeaseSeconds > 0 {
		leaseSeconds = &r.LeaseSeconds
	}
	rows, err := s.pool.Query(ctx, popSQL, ids.group, partition, r.Partitions, r.Batch, leaseSeconds, r.AutoAck)
	if err != nil {
		return res, fmt.Errorf("pop %s: %w", r.Queue, err)
	}
	defer rows.Close()
	lastPartition := int64(-1)
	var leaseID string
	for rows.Next() {
		var (
			pid                     int64
			pname                   string
			lease                   *[16]byte
			from, to                *int64
			expires                 *time.Time
			attempts                *int32
			m                       protocol.Message
			mid                     [16]byte
			trace                   *string
			headers                 []byte
			payload                 []byte
			redelivered, hasHeaders bool
		)
		if err := rows.Scan(&pid, &pname, &lease, &from, &to, &expires, &attempts,
			&m.Offset, &mid, &m.TransactionID, &payload, &m.CommittedAt, &trace, &headers, &redelivered); err != nil {
			return res, fmt.Errorf("pop %s: %w", r.Queue, err)
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
		m.Queue, m.Partition, m.LeaseID, m.Redelivered = r.Queue, pname, leaseID, redelivered
		m.MessageID = uuid.UUID(mid).String()
		m.Payload = payload
		if trace != nil {
			m.TraceID = *trace
		}
		if hasHeaders = headers != nil; hasHeaders {
			if err := msgpack.Unmarshal(headers, &m.Headers); err != nil {
				return res, fmt.Errorf("pop %s: stored headers of offset %d: %w", r.Queue, m.Offset, err)
			}
		}
		res.Messages = append(res.Messages, m)
	}
	if err := rows.Err(); err != nil {
		return res, fmt.Errorf("pop %s: %w", r.Queue, err)
	}
	return res, nil
}
