package queenside

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

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
// the queenside schema's SQL API (queenside.send_batch), without a
// sidecar: in a transaction, the messages commit or roll back with it (the
// transactional outbox). The items of a queue go in one statement, and
// take their partitions' row locks until the transaction ends, during
// which other pushes to those partitions wait: push last, just before
// COMMIT. The results are those of Push, with queued or duplicate; the
// payload is stored as Push would store it, and a commit wakes waiting
// pops on every sidecar. A refusal is a *Error of the protocol's code
// (invalid_argument, unavailable for push maintenance, unsupported for a
// queue with sealed payloads), wrapping the *pgconn.PgError; nothing is
// sent for an item without a queue or payload. Its wait is bounded by ctx
// alone: the sidecar's --database-timeout has no part in it.
func PushTx(ctx context.Context, q Querier, items ...PushItem) ([]PushResult, error) {
	if err := checkPushItems(items); err != nil {
		return nil, err
	}
	out := make([]PushResult, len(items))
	for _, batch := range byQueue(items) {
		n := len(batch)
		payloads := make([][]byte, n)
		partitions := make([]string, n)
		txids := make([]*string, n)
		var headers []map[string]string // NULL when no item has any
		var traces []*string            // likewise
		for k, i := range batch {
			it := items[i]
			payloads[k] = it.Payload
			partitions[k] = it.Partition
			if partitions[k] == "" {
				partitions[k] = protocol.DefaultPartition
			}
			txids[k] = orNull(it.TransactionID)
			if len(it.Headers) > 0 {
				if headers == nil {
					headers = make([]map[string]string, n)
				}
				headers[k] = it.Headers
			}
			if it.TraceID != "" {
				if traces == nil {
					traces = make([]*string, n)
				}
				traces[k] = &it.TraceID
			}
		}
		var statuses, messageIDs, transactionIDs []string
		var offsets []int64
		err := q.QueryRow(ctx, `SELECT array_agg(b.status ORDER BY b.n), array_agg(b."offset" ORDER BY b.n),
				array_agg(b.message_id::text ORDER BY b.n), array_agg(b.transaction_id ORDER BY b.n)
			FROM queenside.send_batch($1, $2, $3, $4, $5::jsonb[], $6) WITH ORDINALITY AS b (status, "offset", message_id, transaction_id, n)`,
			items[batch[0]].Queue, payloads, partitions, txids, headers, traces).
			Scan(&statuses, &offsets, &messageIDs, &transactionIDs)
		if err != nil {
			return nil, sqlError("push", batch, err)
		}
		for k, i := range batch {
			out[i] = PushResult{Index: i, Status: statuses[k], Queue: items[i].Queue, Partition: partitions[k],
				TransactionID: transactionIDs[k], MessageID: messageIDs[k], Offset: &offsets[k]}
		}
	}
	return out, nil
}

// byQueue groups the indexes of items by queue, each group in the items'
// order, the groups in the order their queues first appear.
func byQueue(items []PushItem) [][]int {
	var groups [][]int
	group := map[string]int{}
	for i, it := range items {
		g, ok := group[it.Queue]
		if !ok {
			g = len(groups)
			group[it.Queue] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	return groups
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
			return AckResult{}, sqlError("ack", []int{i}, err)
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

// sqlMessageNumber is how the SQL API names the message of a batch a
// refusal is about: "message N: ", N counted from 1.
var sqlMessageNumber = regexp.MustCompile(`^queenside: message ([0-9]+): `)

// sqlError turns a refusal of the SQL API, whose DETAIL is the protocol's
// code, into that *Error, naming the item it is about as op (push, ack)
// names it, items holding the indexes of the statement's items; what
// else went wrong is returned as it is.
func sqlError(op string, items []int, err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || !slices.Contains(protocol.Codes(), protocol.Code(pgErr.Detail)) {
		return fmt.Errorf("queenside: %s: %w", op, err)
	}
	what, reason := op, strings.TrimPrefix(pgErr.Message, "queenside: ")
	if m := sqlMessageNumber.FindStringSubmatch(pgErr.Message); m != nil {
		if k, _ := strconv.Atoi(m[1]); k >= 1 && k <= len(items) {
			what, reason = fmt.Sprintf("%s item %d", op, items[k-1]), pgErr.Message[len(m[0]):]
		}
	} else if len(items) == 1 {
		what = fmt.Sprintf("%s item %d", op, items[0])
	}
	e := protocol.Errorf(protocol.Code(pgErr.Detail), "%s: %s", what, reason)
	return fmt.Errorf("%w (%w)", e, pgErr)
}
