// Package citustest starts a throwaway Citus cluster for tests: a
// coordinator and workers, each a local PostgreSQL server (pgserver) with
// Citus loaded, the workers added to the coordinator. Citus is not a
// Debian package; the tests that need it run where a local build is
// installed (citus.so among the server's libraries) and skip with one line
// elsewhere.
package citustest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queenside/queenside/sidecar/pgserver"
)

// Database is the database made on every node, with the citus extension:
// Citus keeps its metadata per database and does not propagate CREATE
// DATABASE, so a cluster's tests share this one.
const Database = "queenside"

// settings are each node's: Citus must be the first library loaded; 2PC
// needs prepared transactions; shard moves need logical decoding. The nodes
// reach each other over their Unix sockets, where SSL does not apply.
var settings = []string{
	"shared_preload_libraries=citus",
	"max_prepared_transactions=200",
	"wal_level=logical",
	"citus.node_conninfo='sslmode=disable'",
}

// Missing says why Citus tests cannot run here, or "" when they can.
func Missing() string {
	dir, err := pgserver.LibraryDir()
	if err != nil {
		return "citustest: no PostgreSQL server here: " + err.Error()
	}
	if _, err := os.Stat(filepath.Join(dir, "citus.so")); err != nil {
		return "citustest: Citus is not installed (no citus.so in " + dir + "): the Citus tests skip; SCALING.md says how to run them"
	}
	return ""
}

// Cluster is a running coordinator and its workers.
type Cluster struct {
	Coordinator *pgserver.Server
	Workers     []*pgserver.Server
	dir         string
}

// URL is a connection string for Database on the coordinator, the only
// node sidecars connect to.
func (c *Cluster) URL() string { return c.Coordinator.URL(Database) }

// Connect opens a connection to Database on the coordinator, closed when
// t ends.
func (c *Cluster) Connect(t testing.TB) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), c.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// Start skips t when Citus is missing; otherwise it starts a coordinator
// and the given number of workers under a temporary directory, and stops
// them when t ends.
func Start(t testing.TB, workers int) *Cluster {
	t.Helper()
	if why := Missing(); why != "" {
		t.Skip(why)
	}
	dir, err := os.MkdirTemp("", "queenside-citus-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil { // the servers run as postgres
		t.Fatal(err)
	}
	c := &Cluster{dir: dir}
	t.Cleanup(c.stop)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if c.Coordinator, err = c.startNode(ctx, "coordinator"); err != nil {
		t.Fatal(err)
	}
	if err := exec(ctx, c.URL(), fmt.Sprintf("SELECT citus_set_coordinator_host(%s, %d)",
		quote(c.Coordinator.SocketDir()), c.Coordinator.Port())); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < workers; i++ {
		if _, err := c.AddWorker(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// AddWorker starts one more worker and adds it to the cluster; its shards
// come only with a rebalance.
func (c *Cluster) AddWorker(ctx context.Context) (*pgserver.Server, error) {
	w, err := c.startNode(ctx, "worker"+strconv.Itoa(len(c.Workers)+1))
	if err != nil {
		return nil, err
	}
	c.Workers = append(c.Workers, w)
	return w, exec(ctx, c.URL(), fmt.Sprintf("SELECT citus_add_node(%s, %d)", quote(w.SocketDir()), w.Port()))
}

func (c *Cluster) startNode(ctx context.Context, name string) (*pgserver.Server, error) {
	s, err := pgserver.Start(ctx, pgserver.Options{Dir: filepath.Join(c.dir, name), Fast: true, Settings: settings})
	if err != nil {
		return nil, fmt.Errorf("citustest: %s: %w", name, err)
	}
	if err := exec(ctx, s.URL("postgres"), "CREATE DATABASE "+Database); err != nil {
		return s, fmt.Errorf("citustest: %s: %w", name, err)
	}
	if err := exec(ctx, s.URL(Database), "CREATE EXTENSION citus"); err != nil {
		return s, fmt.Errorf("citustest: %s: %w", name, err)
	}
	return s, nil
}

func (c *Cluster) stop() {
	for _, s := range append([]*pgserver.Server{c.Coordinator}, c.Workers...) {
		if s != nil {
			s.Stop("immediate") //nolint:errcheck // a throwaway cluster
			os.RemoveAll(s.SocketDir())
			if base := filepath.Dir(s.DataDir()); !strings.HasPrefix(base, c.dir) {
				os.RemoveAll(base) // pgserver's fallback under /var/tmp
			}
		}
	}
	os.RemoveAll(c.dir)
}

func exec(ctx context.Context, url, sql string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("%s: %w", sql, err)
	}
	return nil
}

// quote makes s an SQL string literal.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
