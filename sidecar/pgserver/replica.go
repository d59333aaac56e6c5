package pgserver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
)

// Streaming replication, for tests of a failover: a standby made from a
// primary with pg_basebackup, its promotion, and the old primary rewound
// with pg_rewind to follow the new one.

// tool finds a server program (pg_basebackup, pg_rewind) beside pg_ctl,
// following a symlink to where the distribution keeps them.
func (b *binaries) tool(name string) (string, error) {
	dirs := []string{b.dir}
	if real, err := filepath.EvalSymlinks(filepath.Join(b.dir, "pg_ctl")); err == nil {
		dirs = append(dirs, filepath.Dir(real))
	}
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%s not found beside %s", name, b.pgCtl)
}

// conninfo is a libpq connection string to the server's socket, as a
// standby's primary_conninfo names its primary.
func (s *Server) conninfo() string {
	return fmt.Sprintf("host=%s port=%d user=postgres", s.sockDir, port)
}

// StartStandby copies primary into opts.Dir with pg_basebackup, as a
// streaming standby of it (-R: standby.signal and primary_conninfo), and
// starts it. Its name in pg_stat_replication is filepath.Base(opts.Dir).
func StartStandby(ctx context.Context, primary *Server, opts Options) (*Server, error) {
	s := &Server{opts: opts, log: opts.Logger}
	if s.log == nil {
		s.log = hclog.NewNullLogger()
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if s.ra, err = newRunAs(); err != nil {
		return nil, err
	}
	base, err := baseDir(dir, s.ra, s.log)
	if err != nil {
		return nil, err
	}
	s.pgdata, s.logFile, s.bin = filepath.Join(base, "pgdata"), filepath.Join(base, "postgres.log"), primary.bin
	if err := os.MkdirAll(s.pgdata, 0o700); err != nil {
		return nil, err
	}
	if err := s.ra.chown(s.pgdata); err != nil {
		return nil, err
	}
	basebackup, err := s.bin.tool("pg_basebackup")
	if err != nil {
		return nil, fmt.Errorf("pgserver: %w", err)
	}
	conn := primary.conninfo() + " application_name=" + filepath.Base(dir)
	out, err := s.ra.command(ctx, basebackup, "-D", s.pgdata, "-R", "-X", "stream", "-c", "fast", "-d", conn).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("pgserver: pg_basebackup: %w\n%s", err, strings.TrimSpace(string(out)))
	}
	if s.sockDir, err = makeSocketDir(s.ra); err != nil {
		return nil, err
	}
	if err := s.pgCtlStart(ctx); err != nil {
		return nil, fmt.Errorf("pgserver: %w", err)
	}
	return s, nil
}

// Promote ends recovery on a standby: it becomes a primary. Having no
// standby of its own yet, it stops waiting for one (synchronous_standby_names
// copied from its old primary would make every commit hang).
func (s *Server) Promote(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	out, err := s.ra.command(ctx, s.bin.pgCtl, "promote", "-w", "-t", waitSeconds(ctx), "-D", s.pgdata).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgserver: pg_ctl promote: %w\n%s", err, strings.TrimSpace(string(out)))
	}
	if err := s.exec(ctx, "ALTER SYSTEM RESET synchronous_standby_names", "SELECT pg_reload_conf()"); err != nil {
		return fmt.Errorf("pgserver: after promotion: %w", err)
	}
	return nil
}

// RequireSynchronousStandby has every commit wait for a standby's flush,
// and returns once a standby streams as synchronous.
func (s *Server) RequireSynchronousStandby(ctx context.Context) error {
	if err := s.exec(ctx, "ALTER SYSTEM SET synchronous_standby_names = '*'", "SELECT pg_reload_conf()"); err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	for {
		var n int
		conn, err := pgx.Connect(ctx, s.URL("postgres"))
		if err == nil {
			err = conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync' AND state = 'streaming'").Scan(&n)
			conn.Close(context.WithoutCancel(ctx))
		}
		if err == nil && n > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgserver: no synchronous standby streams (%v)", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// exec runs statements on the server's postgres database, one by one.
func (s *Server) exec(ctx context.Context, sqls ...string) error {
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, sql := range sqls {
		if _, err := conn.Exec(ctx, sql); err != nil {
			return fmt.Errorf("%s: %w", sql, err)
		}
	}
	return nil
}

// Rejoin makes this stopped server, a primary that lost its place, a
// standby of source: pg_rewind takes its data back to where the two
// diverged (the server needs wal_log_hints or data checksums; pg_rewind
// first finishes the crash recovery of a server stopped in immediate
// mode), writes standby.signal and a primary_conninfo naming source, and
// the server starts again with its socket directory and port.
func (s *Server) Rejoin(ctx context.Context, source *Server) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	rewind, err := s.bin.tool("pg_rewind")
	if err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	// A promoted server records its new timeline in pg_control at its next
	// checkpoint, and pg_rewind reads it there: until then it finds both on
	// one timeline and rewinds nothing.
	if err := source.checkpoint(ctx); err != nil {
		return fmt.Errorf("pgserver: checkpoint on the source: %w", err)
	}
	conn := source.conninfo() + " application_name=" + filepath.Base(filepath.Dir(s.pgdata))
	out, err := s.ra.command(ctx, rewind, "--target-pgdata", s.pgdata, "--source-server", conn, "--write-recovery-conf").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgserver: pg_rewind: %w\n%s", err, strings.TrimSpace(string(out)))
	}

	if err := ensureSocketDir(s.ra, s.sockDir); err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	if err := s.pgCtlStart(ctx); err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	return nil
}

func (s *Server) checkpoint(ctx context.Context) error { return s.exec(ctx, "CHECKPOINT") }
