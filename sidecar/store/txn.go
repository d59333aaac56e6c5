package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"

	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/telemetry"
)

// querier is what the push and ack statements need: the pool, or a
// transaction they are part of.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// ConflictError is a transaction that did not commit because an ack item
// could not succeed; Acks says which, item by item.
type ConflictError struct {
	Acks []protocol.AckItemResult
}

func (e *ConflictError) Error() string {
	failed := 0
	for _, r := range e.Acks {
		if !r.Success {
			failed++
		}
	}
	return fmt.Sprintf("%d of %d ack items could not succeed; nothing was committed", failed, len(e.Acks))
}

// Transaction commits acks and pushes in one PostgreSQL transaction, or
// nothing: if any ack item cannot succeed, it returns a *ConflictError.
// The pushes go first, so that partition rows are locked before cursor
// rows, the order every push takes them in; the acks then cannot deadlock
// with a push. The partitions are created (if new) before, on their own:
// an empty partition is no effect of the transaction.
func (s *Store) Transaction(ctx context.Context, acks []protocol.AckItem, msgs []Message) (_ protocol.AckResult, _ []Outcome, err error) {
	var ackRes protocol.AckResult
	var outcomes []Outcome
	span := noSpan
	if telemetry.Enabled() {
		span = telemetry.StartDB(telemetry.DBTransaction, []context.Context{ctx}, telemetry.MessageCount(len(msgs)),
			attribute.Int("queenside.transaction.acks", len(acks)))
	}
	defer func() { telemetry.End(span, err) }()
	err = againIfAborted(ctx, func() (err error) {
		ackRes, outcomes, err = s.transaction(ctx, acks, msgs)
		if isNoData(err) { // a cached partition is gone
			s.parts.reset()
			ackRes, outcomes, err = s.transaction(ctx, acks, msgs)
		}
		return err
	})
	return ackRes, outcomes, err
}

func (s *Store) transaction(ctx context.Context, acks []protocol.AckItem, msgs []Message) (protocol.AckResult, []Outcome, error) {
	ackRes := protocol.AckResult{Results: []protocol.AckItemResult{}, Leases: []protocol.LeaseState{}}
	var ids []int64
	var shards [][]int
	if len(msgs) > 0 {
		var err error
		if ids, shards, err = s.pushShards(ctx, msgs); err != nil {
			return ackRes, nil, err
		}
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return ackRes, nil, fmt.Errorf("transaction: begin: %w", err)
	}
	defer s.rollback(ctx, tx)
	var outcomes []Outcome
	if len(msgs) > 0 {
		if outcomes, err = s.pushThrough(ctx, tx, msgs, ids, shards); err != nil {
			return ackRes, nil, err
		}
	}
	if len(acks) > 0 {
		if ackRes, err = s.ackThrough(ctx, tx, acks); err != nil {
			return ackRes, nil, err
		}
		for _, r := range ackRes.Results {
			if !r.Success {
				return ackRes, nil, &ConflictError{Acks: ackRes.Results}
			}
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return ackRes, nil, fmt.Errorf("transaction: commit: %w", err)
	}
	s.wakeRouted(msgs)
	s.wakeRewound(acks, ackRes)
	return ackRes, outcomes, nil
}

// queueBegin queues a batch's BEGIN. A transaction whose COMMIT is not in
// the batch (see settle) sits idle on the server while the sidecar reads
// its results, the whole of a pop's payloads among them, and the server's
// guard ends a session idle in a transaction for T/5 (a second at the
// default): so such a transaction raises it, for itself, to the database
// timeout, which bounds the call anyway. Under load, a pop of a 16 MB
// message with acks as it goes was cut by the guard before its COMMIT.
// begun reads what queueBegin queued.
func (s *Store) queueBegin(b *pgx.Batch, pipelined bool) {
	b.Queue("BEGIN")
	if !pipelined {
		b.Queue(fmt.Sprintf("SET LOCAL idle_in_transaction_session_timeout = %d", s.timeout.Milliseconds()))
	}
}

// begun reads the answers to what queueBegin queued.
func begun(br pgx.BatchResults, pipelined bool) error {
	if _, err := br.Exec(); err != nil || pipelined {
		return err
	}
	_, err := br.Exec()
	return err
}

// settle ends a transaction whose statements went in one batch after its
// BEGIN, and with its COMMIT when pipelined: err, the batch's error, rolls
// it back; otherwise one not pipelined is committed if keep, or rolled back
// (a pop result too large to send). It returns err, or the error of ending
// it. A connection still inside a transaction when this fails is destroyed
// by the pool on release, never reused.
func settle(ctx context.Context, conn *pgxpool.Conn, pipelined, keep bool, err error) error {
	if pipelined && err == nil {
		return nil
	}
	end := "COMMIT"
	if err != nil || !keep {
		end = "ROLLBACK"
	}
	if _, eerr := conn.Exec(ctx, end); eerr != nil && err == nil {
		return fmt.Errorf("%s: %w", strings.ToLower(end), eerr)
	}
	return err
}
