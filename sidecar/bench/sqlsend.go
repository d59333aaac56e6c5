package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// The sqlsend scenario is push's messages (cfg.Messages of
// cfg.PayloadBytes over cfg.Partitions partitions, cfg.Connections
// connections) sent without the sidecar, from the application's own
// transactions, through the SQL API: cfg.Batch messages a transaction,
// in one queenside.send_batch, as the clients' PushTx sends a queue's
// items. Beside push in one run, it says what a message costs pushed from
// SQL (the outbox) against the sidecar's batched pushes.

const sqlSendBatch = `SELECT FROM queenside.send_batch($1, $2, $3, $4)`

func (b *bench) scenarioSQLSend(ctx context.Context) (r Result) {
	r = Result{Name: ScenarioSQLSend}
	if b.dbURL == "" {
		r.setupFailed(errors.New("sqlsend writes to the database: give --database-url with --socket"))
		return r
	}
	queue := b.queue(ScenarioSQLSend)
	b.runSQLBatches(ctx, &r, func(c *pgx.Conn, from, n int64) error {
		payloads := make([][]byte, n)
		partitions := make([]string, n)
		txids := make([]string, n)
		now := time.Now()
		for k := range n {
			payloads[k] = b.pay.stamped(now)
			partitions[k] = "p" + strconv.FormatInt((from+k)%int64(b.cfg.Partitions), 10)
			txids[k] = b.runID + "-sqlsend-" + strconv.FormatInt(from+k, 10)
		}
		err := pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, sqlSendBatch, queue, payloads, partitions, txids)
			return err
		})
		if err != nil {
			return fmt.Errorf("send: %w", err)
		}
		return nil
	})
	return r
}
