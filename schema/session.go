package schema

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
)

// PoolerError means a connection meant to hold a session reaches a
// connection pooler instead of PostgreSQL itself.
type PoolerError struct {
	Announced, Answering uint32 // the backend process ids
}

func (e *PoolerError) Error() string {
	return "the connection leads to a connection pooler, not to PostgreSQL itself " + e.Evidence()
}

// Evidence says how the pooler was told apart.
func (e *PoolerError) Evidence() string {
	return fmt.Sprintf("(the server process that answers, %d, is not the one announced at connect, %d)",
		e.Answering, e.Announced)
}

// CheckSession refuses a connection that goes through a connection pooler.
// Migrations hold an advisory lock of the session across transactions, and
// a pooler in transaction mode hands each transaction to any server
// connection: the lock would be taken on one backend and the work done on
// another, and statements pgx prepares by name collide with those other
// clients prepared there. PostgreSQL announces the process id of the
// backend serving a connection when it opens; a pooler announces one of
// its own (PgBouncer: random bytes), which the backend that runs a
// statement contradicts. The statement goes as a simple query, which any
// pooler passes and which prepares nothing.
func CheckSession(ctx context.Context, conn *pgx.Conn) error {
	results, err := conn.PgConn().Exec(ctx, "SELECT pg_backend_pid()").ReadAll()
	if err != nil {
		return fmt.Errorf("check the session: %w", err)
	}
	if len(results) != 1 || len(results[0].Rows) != 1 || len(results[0].Rows[0]) != 1 {
		return fmt.Errorf("check the session: pg_backend_pid() answered %d results", len(results))
	}
	pid, err := strconv.ParseUint(string(results[0].Rows[0][0]), 10, 32)
	if err != nil {
		return fmt.Errorf("check the session: pg_backend_pid() answered %q", results[0].Rows[0][0])
	}
	if announced := conn.PgConn().PID(); uint32(pid) != announced {
		return &PoolerError{Announced: announced, Answering: uint32(pid)}
	}
	return nil
}
