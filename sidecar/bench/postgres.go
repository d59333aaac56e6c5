package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"
)

// benchDatabase is the database created in the benchmark's own server.
const benchDatabase = "queenside_bench"

// reportedSettings are recorded besides synchronous_commit and fsync:
// they also decide what a commit costs or how much fits in memory.
var reportedSettings = []string{"full_page_writes", "wal_level", "shared_buffers", "max_connections", "max_wal_size"}

func createDatabase(ctx context.Context, adminURL, name string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

// inspectPostgres asks the server for its version and settings and, unless
// postmaster is already known, looks for its postmaster among this
// machine's processes. A postmaster that cannot be found is returned as 0:
// the server is remote, in another pid namespace, or not ours to read.
func inspectPostgres(ctx context.Context, url string, postmaster int) (*PostgresInfo, int, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, 0, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer conn.Close(context.Background())
	show := func(name string) (string, error) {
		var v string
		err := conn.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v)
		return v, err
	}
	info := &PostgresInfo{Settings: map[string]string{}}
	if info.Version, err = show("server_version"); err != nil {
		return nil, 0, fmt.Errorf("read server_version: %w", err)
	}
	if info.SynchronousCommit, err = show("synchronous_commit"); err != nil {
		return nil, 0, fmt.Errorf("read synchronous_commit: %w", err)
	}
	if info.Fsync, err = show("fsync"); err != nil {
		return nil, 0, fmt.Errorf("read fsync: %w", err)
	}
	for _, name := range reportedSettings {
		if v, err := show(name); err == nil {
			info.Settings[name] = v
		}
	}
	if postmaster == 0 {
		postmaster = findPostmaster(ctx, conn, show)
	}
	return info, postmaster, nil
}

// findPostmaster finds the postmaster through this connection's own
// backend: a local backend is a process named postgres whose parent is the
// postmaster. When the data directory is readable, its postmaster.pid must
// name that same parent, which rules out a coincidental pid from another
// machine or namespace.
func findPostmaster(ctx context.Context, conn *pgx.Conn, show func(string) (string, error)) int {
	var backend int
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backend); err != nil {
		return 0
	}
	be, err := readStat(backend)
	if err != nil || be.comm != "postgres" {
		return 0
	}
	if dir, err := show("data_directory"); err == nil {
		if pid, err := readPIDFile(filepath.Join(dir, "postmaster.pid")); err == nil {
			if pid == be.ppid {
				return pid
			}
			return 0
		}
	}
	// The data directory is hidden from this user: accept the parent if it
	// is a PostgreSQL process too.
	if pm, err := readStat(be.ppid); err == nil && (pm.comm == "postgres" || pm.comm == "postmaster") {
		return be.ppid
	}
	return 0
}
