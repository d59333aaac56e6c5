package queenside

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/queenside/queenside/protocol"
)

// Querier is what PushTx and AckTx need of the application's own
// PostgreSQL connection: a pgx.Tx, a *pgx.Conn, a *pgxpool.Pool or a
// *pgxpool.Conn. Given a transaction, they run in it.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// PushTx pushes items on q, the application's own connection, through
// the queenside schema's SQL API (queenside.send), without a sidecar: in a
// transaction, the messages commit or roll back with it (the transactional
// outbox). Each item is one statement, and takes its partition's row lock
// until the transaction ends, during which other pushes to that partition
// wait: push last, just before COMMIT. The results are those of Push,
// with queued or duplicate; the payload is stored as Push would store it,
// and a commit wakes waiting pops on every sidecar. A refusal is a
// *Error of the protocol's code (invalid_argument, unavailable for push
// maintenance, unsupported for a queue with sealed payloads), wrapping the
// *pgconn.PgError; nothing is sent for an item without a queue or payload.
func PushTx(ctx context.Context, q Querier, items ...PushItem) ([]PushResult, error) {
	if err := checkPushItems(items); err != nil {
		return nil, err
	}
	out := make([]PushResult, len(items))
	for i, it := range items {
		partition := it.Partition
		if partition == "" {
			partition = protocol.DefaultPartition
		}
		var headers any // SQL NULL without headers, a JSON object with
		if len(it.Headers) > 0 {
			headers = it.Headers
		}
		r := PushResult{Index: i, Queue: it.Queue, Partition: partition}
		var offset int64
		err := q.QueryRow(ctx, `SELECT status, "offset", message_id::text, transaction_id
			FROM queenside.send($1, $2, $3, $4, $5::jsonb, $6)`,
			it.Queue, []byte(it.Payload), partition, orNull(it.TransactionID), headers, orNull(it.TraceID)).
			Scan(&r.Status, &offset, &r.MessageID, &r.TransactionID)
		if err != nil {
			return nil, sqlError(fmt.Sprintf("push item %d", i), err)
		}
		r.Offset = &offset
		out[i] = r
	}
	return out, nil
}

// AckTx acks items on q, the application's own connection, through the
// queenside schema's SQL API (queenside.ack_message): in a transaction,
// the acks commit or roll back with it, so that a consumer's effects on
// its own tables and its acks are one (the inbox); rolled back, the
// leases are as they were. The semantics are Ack's, item by item: each
// result says success, or the per-item code (lease_expired,
// already_acked...). Leases is empty.
func AckTx(ctx context.Context, q Querier, items ...AckItem) (AckResult, error) {
	res := AckResult{Results: make([]AckItemResult, len(items)), Leases: []protocol.LeaseState{}}
	for i, it := range items {
		status := it.Status
		if status == "" {
			status = protocol.DefaultAckMode
		}
		var code *string
		r := AckItemResult{Index: i}
		err := q.QueryRow(ctx, `SELECT success, code, dead_lettered FROM queenside.ack_message($1, $2, $3, $4, $5)`,
			it.LeaseID, it.Offset, status, orNull(it.Error), orNull(it.TransactionID)).Scan(&r.Success, &code, &r.DeadLettered)
		if err != nil {
			return AckResult{}, sqlError(fmt.Sprintf("ack item %d", i), err)
		}
		if code != nil {
			r.Code = *code
		}
		res.Results[i] = r
	}
	return res, nil
}

// orNull is s as a parameter, SQL NULL when empty.
func orNull(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// sqlError turns a refusal of the SQL API, whose DETAIL is the protocol's
// code, into that *Error; what else went wrong is returned as it is.
func sqlError(what string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && slices.Contains(protocol.Codes(), protocol.Code(pgErr.Detail)) {
		e := protocol.Errorf(protocol.Code(pgErr.Detail), "%s: %s", what, pgErr.Message)
		return fmt.Errorf("%w (%w)", e, pgErr)
	}
	return fmt.Errorf("queenside: %s: %w", what, err)
}
