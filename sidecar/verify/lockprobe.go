package verify

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The lock probe measures how soon partition rows a stalled or cut-off
// sidecar may hold locks on can be locked by another session: a session
// whose client vanished keeps its transaction's row locks until the server
// ends it, and until then every push to those partitions waits.
const (
	// lockProbeEvery is the pause between two attempts.
	lockProbeEvery = 100 * time.Millisecond
	// lockProbeTimeout is an attempt's statement_timeout: a row a live
	// push holds is free within it, one a vanished session holds is not.
	lockProbeTimeout = 250 * time.Millisecond
)

// lockProbe is a probe running in the background.
type lockProbe struct {
	done chan struct{}
	took time.Duration
	err  error
}

// probeLocks starts trying to lock rows, from now on, every lockProbeEvery,
// in a short transaction that is rolled back, on a connection of the
// verifier's own over the Unix socket (which no partition cuts). wait
// returns how long after from the first attempt succeeded.
func (in *injector) probeLocks(ctx context.Context, rows lockRows, from time.Time) *lockProbe {
	p := &lockProbe{done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.took, p.err = in.lockWhenFree(ctx, rows, from)
	}()
	return p
}

func (p *lockProbe) wait() (time.Duration, error) {
	<-p.done
	return p.took, p.err
}

func (in *injector) lockWhenFree(ctx context.Context, rows lockRows, from time.Time) (time.Duration, error) {
	deadline := from.Add(recoveryTimeout)
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	var last error
	for {
		if conn == nil {
			cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			url := in.cl.dbURL
			if rows.worker != nil {
				url = rows.worker.URL(verifyDatabase)
			}
			conn, last = pgx.Connect(cctx, url)
			cancel()
		}
		if conn != nil {
			if last = lockOnce(ctx, conn, rows); last == nil {
				return time.Since(from), nil
			}
			if !lockBusy(last) {
				conn.Close(context.Background())
				conn = nil
			}
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%s still not lockable %v after the fault began: %w", rows.what, recoveryTimeout, last)
		}
		sleep(ctx, lockProbeEvery)
	}
}

// lockOnce locks every row of rows, in id order as a push does (so that
// the two never deadlock), within lockProbeTimeout a statement, and rolls
// back.
func lockOnce(ctx context.Context, conn *pgx.Conn, rows lockRows) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a probe: nothing to keep
	if _, err := tx.Exec(ctx, "SET LOCAL statement_timeout = "+strconv.FormatInt(lockProbeTimeout.Milliseconds(), 10)); err != nil {
		return err
	}
	for i, ids := range rows.groups {
		if _, err := tx.Exec(ctx, "SELECT id FROM "+rows.table(i)+" WHERE id IN ("+idList(ids)+") ORDER BY id FOR UPDATE"); err != nil {
			return err
		}
	}
	return nil
}

// idList writes ids as an SQL list. They are inlined, not a parameter, so
// that Citus sees the shard of a statement when it plans it.
func idList(ids []int64) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.FormatInt(id, 10)
	}
	return strings.Join(s, ",")
}

// lockBusy tells an attempt that found a row locked (its statement
// timeout, or a deadlock with a push) from one whose connection failed.
func lockBusy(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "57014" || pe.Code == "55P03" || pe.Code == "40P01")
}
