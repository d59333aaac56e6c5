package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queenside/queenside/sidecar/citustest"
	"github.com/queenside/queenside/sidecar/pgserver"
)

// URLEnv names the variable pointing the harness at an existing server.
const URLEnv = "TEST_DATABASE_URL"

// CitusEnv, set to 1, runs the tests on a Citus cluster the harness starts:
// a coordinator and two workers, every database distributed
// (schema.Distribute) and the tests connected to the coordinator, as
// sidecars are. Server is then the coordinator.
const CitusEnv = "QUEENSIDE_TEST_CITUS"

// citusWorkers is the size of the cluster CitusEnv starts.
const citusWorkers = 2

// harness is what Main sets up for the tests in one test binary. It is
// written before m.Run and only read while tests run.
type harness struct {
	ready    bool
	given    string // TEST_DATABASE_URL, or "" when we run our own server
	adminURL string
	server   *pgserver.Server
	cluster  *citustest.Cluster // with CitusEnv; server is its coordinator
	dirs     []string           // removed after the server stops
	reapers  []*exec.Cmd
	admin    *pgxpool.Pool

	tmplOnce sync.Once
	tmpl     string
	tmplErr  error
}

var h harness

// Main is called from TestMain: it finds or starts PostgreSQL, runs m.Run(),
// stops what it started, and exits with the result.
func Main(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if os.Getenv(CitusEnv) == "1" {
		if why := citustest.Missing(); why != "" {
			fmt.Fprintf(os.Stderr, "pgtest: %s=1 skips this package's tests: %s\n", CitusEnv, why)
			return 0
		}
	}
	if err := setup(); err != nil {
		teardown()
		if os.Getenv("CI") == "true" {
			fmt.Fprintf(os.Stderr, "pgtest: FAIL: PostgreSQL is required in CI and is not usable: %v\n", err)
		} else {
			fmt.Fprintf(os.Stderr, "pgtest: these tests need PostgreSQL, which is not usable: %v\n"+
				"pgtest: install the PostgreSQL server (initdb and pg_ctl; e.g. apt install postgresql) "+
				"or set %s to a database on a server where you may CREATE DATABASE.\n", err, URLEnv)
		}
		return 1
	}
	code := m.Run()
	if err := teardown(); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: cleaning up: %v\n", err)
	}
	return code
}

func setup() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	switch {
	case os.Getenv(CitusEnv) == "1":
		if err := startCluster(ctx); err != nil {
			return err
		}
	case os.Getenv(URLEnv) != "":
		h.given = os.Getenv(URLEnv)
		h.adminURL = pickAdminURL(ctx, h.given)
	default:
		if err := startServer(ctx); err != nil {
			return err
		}
	}

	var err error
	if h.admin, err = pgxpool.New(ctx, h.adminURL); err != nil {
		return fmt.Errorf("admin connection: %w", err)
	}
	if err := h.admin.Ping(ctx); err != nil {
		return fmt.Errorf("connecting to %s: %w", redact(h.adminURL), err)
	}
	h.ready = true
	return nil
}

// pickAdminURL prefers the maintenance database "postgres" on the given
// server, so that the database named in the URL is not held open, but falls
// back to the URL as given for servers without it.
func pickAdminURL(ctx context.Context, given string) string {
	u := withDatabase(given, "postgres")
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return given
	}
	conn.Close(ctx)
	return u
}

// startServer runs a throwaway server in a fresh temporary directory.
func startServer(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "queenside-pgtest-")
	if err != nil {
		return err
	}
	h.dirs = append(h.dirs, dir)
	// MkdirTemp makes it 0700; as root the server runs as postgres, which
	// must be able to get in (else pgserver falls back to /var/tmp).
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	s, err := pgserver.Start(ctx, pgserver.Options{Dir: dir, Fast: true})
	if err != nil {
		return err
	}
	h.server = s
	h.adminURL = s.URL("postgres")
	if base := filepath.Dir(s.DataDir()); base != dir {
		h.dirs = append(h.dirs, base) // pgserver's root fallback
	}
	h.reapers = append(h.reapers, startReaper(s, h.dirs))
	return nil
}

// startCluster runs a throwaway Citus cluster (CitusEnv).
func startCluster(ctx context.Context) error {
	c, err := citustest.StartCluster(ctx, citustest.Options{Workers: citusWorkers})
	if c != nil {
		h.cluster = c
		for i, s := range c.Nodes() {
			var dirs []string
			if i == 0 {
				dirs = []string{c.Dir()}
			}
			if s != nil {
				h.reapers = append(h.reapers, startReaper(s, dirs))
			}
		}
	}
	if err != nil {
		return err
	}
	h.server = c.Coordinator
	h.adminURL = c.Coordinator.URL("postgres")
	return nil
}

// teardown undoes setup: it drops nothing that tests created (their
// cleanups do), stops our server and removes its files.
func teardown() error {
	if h.admin != nil {
		h.admin.Close()
	}
	var errs []error
	switch {
	case h.cluster != nil:
		h.cluster.Stop()
	case h.server != nil:
		if err := h.server.Stop("immediate"); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		for _, d := range h.dirs {
			if err := os.RemoveAll(d); err != nil {
				errs = append(errs, err)
			}
		}
		for _, r := range h.reapers {
			stopReaper(r)
		}
	}
	// On failure the reaper stays: it retries once this process is gone.
	return errors.Join(errs...)
}

// Server returns the harness's own throwaway server, or nil when
// TEST_DATABASE_URL is in use (tests that must stop or crash the server
// cannot run then).
func Server() *pgserver.Server { return h.server }

// AdminURL returns the URL of the maintenance database on the server in use.
func AdminURL() string { return h.adminURL }

// Citus tells whether the tests run on a Citus cluster (CitusEnv).
func Citus() bool { return h.cluster != nil }

// SkipUnlessCitus skips t unless the tests run on a Citus cluster.
func SkipUnlessCitus(t testing.TB) {
	t.Helper()
	if !Citus() {
		t.Skip("a test of Citus: run with " + CitusEnv + "=1 (make test-citus)")
	}
}

// SkipOnCitus skips t on a Citus cluster, saying why: for a test of what
// holds on one PostgreSQL alone (a plan's shape, an order across
// partitions that SCALING.md says Citus keeps per shard only).
func SkipOnCitus(t testing.TB, why string) {
	t.Helper()
	if Citus() {
		t.Skip("on Citus: " + why)
	}
}
