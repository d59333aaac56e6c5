package bench

import (
	"context"
	cryptorand "crypto/rand"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// The insert scenario is what push is measured against: push's messages
// (cfg.Messages of cfg.PayloadBytes, cfg.Batch a request, cfg.Connections
// connections) as plain batched INSERTs, without the sidecar, into a table
// of a row a message with a primary key: no offsets, no deduplication, no
// order. Push stores more than that, so its ratio to this, in one run on
// one PostgreSQL, says what the guarantees cost.

// insertTable is the scenario's table; %[1]s is its schema.
const insertTable = `
CREATE SCHEMA %[1]s;
CREATE TABLE %[1]s.messages (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    partition_name text        NOT NULL,
    message_id     uuid        NOT NULL,
    transaction_id text        NOT NULL,
    payload        bytea       NOT NULL,
    committed_at   timestamptz NOT NULL DEFAULT now())`

// insertBatch is one request: its messages' partitions, ids, transaction
// ids and payloads.
const insertBatch = `
INSERT INTO %[1]s.messages (partition_name, message_id, transaction_id, payload)
SELECT * FROM unnest($1::text[], $2::uuid[], $3::text[], $4::bytea[])`

func (b *bench) scenarioInsert(ctx context.Context) (r Result) {
	r = Result{Name: ScenarioInsert}
	schema, drop, err := b.openScratch(ctx, ScenarioInsert, func(ctx context.Context, db *pgx.Conn, schema string) error {
		if _, err := db.Exec(ctx, fmt.Sprintf(insertTable, schema)); err != nil {
			return fmt.Errorf("create the insert table: %w", err)
		}
		return nil
	})
	if err != nil {
		r.setupFailed(err)
		return r
	}
	defer func() {
		if err := drop(); err != nil {
			r.setupFailed(err)
		}
	}()
	stmt := fmt.Sprintf(insertBatch, schema)
	b.runSQLBatches(ctx, &r, func(c *pgx.Conn, from, n int64) error {
		if _, err := c.Exec(ctx, stmt, insertArgs(b, from, n)...); err != nil {
			return fmt.Errorf("insert: %w", err)
		}
		return nil
	})
	return r
}

// runSQLBatches has cfg.Connections connections of their own to the
// database take push's messages (cfg.Messages) cfg.Batch at a time, from
// the first not taken, each batch sent by send and timed as a push; the
// result goes to r.
func (b *bench) runSQLBatches(ctx context.Context, r *Result, send func(c *pgx.Conn, from, n int64) error) {
	conns := make([]*pgx.Conn, b.cfg.Connections)
	for i := range conns {
		var err error
		if conns[i], err = pgx.Connect(ctx, b.dbURL); err != nil {
			r.setupFailed(fmt.Errorf("connect to PostgreSQL: %w", err))
			return
		}
		defer conns[i].Close(context.Background())
	}
	var next atomic.Int64
	total, batch := int64(b.cfg.Messages), int64(b.cfg.Batch)
	m := b.probe.start()
	ts := tallies(len(conns))
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() {
			for ctx.Err() == nil {
				from := next.Add(batch) - batch
				if from >= total {
					return
				}
				n := min(batch, total-from)
				start := time.Now()
				if err := send(c, from, n); err != nil {
					ts[i].failf("%v", err)
					return
				}
				ts[i].took("push", start)
				ts[i].messages += n
			}
		})
	}
	wg.Wait()
	m.stop(r)
	r.absorb(newTally().merge(ts...), "push")
}

// insertArgs are messages from..from+n-1 as push sends them: spread over
// cfg.Partitions partitions, with a transaction id each.
func insertArgs(b *bench, from, n int64) []any {
	parts, mids := make([]string, n), make([][16]byte, n)
	txids, payloads := make([]string, n), make([][]byte, n)
	now := time.Now()
	for i := range n {
		k := from + i
		parts[i] = "p" + strconv.FormatInt(k%int64(b.cfg.Partitions), 10)
		_, _ = cryptorand.Read(mids[i][:])
		txids[i] = b.runID + "-insert-" + strconv.FormatInt(k, 10)
		payloads[i] = b.pay.stamped(now)
	}
	return []any{parts, mids, txids, payloads}
}
