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
// each one queenside.send, the transaction's statements sent together.
// Beside push in one run, it says what a message costs pushed from SQL
// (the outbox) against the sidecar's batched pushes.

const sqlSend = `SELECT FROM queenside.send($1, $2, $3, $4)`

func (b *bench) scenarioSQLSend(ctx context.Context) (r Result) {
	r = Result{Name: ScenarioSQLSend}
	if b.dbURL == "" {
		r.setupFailed(errors.New("sqlsend writes to the database: give --database-url with --socket"))
		return r
	}
	queue := b.queue(ScenarioSQLSend)
	b.runSQLBatches(ctx, &r, func(c *pgx.Conn, from, n int64) error {
		err := pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
			var sends pgx.Batch
			now := time.Now()
			for k := from; k < from+n; k++ {
				sends.Queue(sqlSend, queue, b.pay.stamped(now), "p"+strconv.FormatInt(k%int64(b.cfg.Partitions), 10),
					b.runID+"-sqlsend-"+strconv.FormatInt(k, 10))
			}
			return tx.SendBatch(ctx, &sends).Close()
		})
		if err != nil {
			return fmt.Errorf("send: %w", err)
		}
		return nil
	})
	return r
}
