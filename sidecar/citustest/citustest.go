// Package citustest starts a throwaway Citus cluster for tests: a
// coordinator and workers, each a local PostgreSQL server (pgserver) with
// Citus loaded, the workers added to the coordinator. Citus is not a
// Debian package; the tests that need it run where a local build is
// installed (citus.so among the server's libraries) and skip with one line
// elsewhere.
package citustest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"

	"github.com/queenside/queenside/schema"
	"github.com/queenside/queenside/sidecar/pgserver"
)

// Database is the database Start makes on every node, with the citus
// extension: Citus keeps its metadata per database and does not propagate
// CREATE DATABASE, so a cluster's tests share this one (or make their own
// with CreateDatabase).
const Database = "queenside"

// Recover2PCInterval is how often the coordinator resolves a transaction
// prepared on a worker whose commit or rollback never came (its session
// was cut short, or the worker went down): until then it holds its rows.
const Recover2PCInterval = 5 * time.Second

// settings are each node's: Citus must be the first library loaded; 2PC
// needs prepared transactions, and a transaction a worker had prepared when
// it went down is resolved within seconds, as README advises, not a minute;
// shard moves need logical decoding; Citus runs a maintenance daemon per
// database, a background worker each. The nodes reach each other over their
// Unix sockets, where SSL does not apply.
var settings = []string{
	"shared_preload_libraries=citus",
	"max_prepared_transactions=200",
	"citus.recover_2pc_interval=" + Recover2PCInterval.String(),
	"max_worker_processes=64",
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
	opts        Options
	dir         string
	ownDir      bool     // made by StartCluster, removed by Stop
	databases   []string // made on every node, each with the workers added
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
// and the given number of workers under a temporary directory, with
// Database on each, and stops them when t ends.
func Start(t testing.TB, workers int) *Cluster {
	t.Helper()
	if why := Missing(); why != "" {
		t.Skip(why)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := StartCluster(ctx, Options{Workers: workers})
	if c != nil {
		t.Cleanup(c.Stop)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CreateDatabase(ctx, Database); err != nil {
		t.Fatal(err)
	}
	return c
}

// Options configure StartCluster.
type Options struct {
	Workers int
	// Dir holds the nodes' clusters, one directory each; "" is a new
	// temporary directory, removed by Stop.
	Dir string
	// Durable keeps PostgreSQL's durable settings (fsync and the rest), as
	// crash tests need; otherwise the nodes trade durability for speed.
	Durable bool
	// Settings are more settings of every node, each "name=value".
	Settings []string
	// Logger receives the servers' progress messages; nil discards them.
	Logger hclog.Logger
}

// StartCluster starts a coordinator and opts.Workers workers. It holds no
// database of queenside's yet (see CreateDatabase). The cluster returned
// with an error is to be stopped.
func StartCluster(ctx context.Context, opts Options) (*Cluster, error) {
	c := &Cluster{opts: opts, dir: opts.Dir}
	if c.dir == "" {
		dir, err := os.MkdirTemp("", "queenside-citus-")
		if err != nil {
			return nil, err
		}
		if err := os.Chmod(dir, 0o755); err != nil { // the servers run as postgres
			return nil, err
		}
		c.dir, c.ownDir = dir, true
	}
	var err error
	if c.Coordinator, err = c.startNode(ctx, "coordinator"); err != nil {
		return c, err
	}
	for range opts.Workers {
		if _, err := c.startWorker(ctx); err != nil {
			return c, err
		}
	}
	return c, nil
}

// Nodes are the coordinator and the workers, in that order.
func (c *Cluster) Nodes() []*pgserver.Server {
	return append([]*pgserver.Server{c.Coordinator}, c.Workers...)
}

// CreateDatabase makes database name on every node with the citus
// extension, and adds the workers to its coordinator: Citus keeps its
// metadata, and the nodes it knows, per database.
func (c *Cluster) CreateDatabase(ctx context.Context, name string) error {
	for _, s := range c.Nodes() {
		if err := c.prepareNode(ctx, s, name); err != nil {
			return err
		}
	}
	url := c.Coordinator.URL(name)
	if err := exec(ctx, url, fmt.Sprintf("SELECT citus_set_coordinator_host(%s, %d)",
		quote(c.Coordinator.SocketDir()), c.Coordinator.Port())); err != nil {
		return err
	}
	for _, w := range c.Workers {
		if err := addNode(ctx, url, w); err != nil {
			return err
		}
	}
	c.databases = append(c.databases, name)
	return nil
}

// Migrate migrates database name on the coordinator and lays it out over
// the cluster (schema.Distribute) in shards shards, 0 for the default.
func (c *Cluster) Migrate(ctx context.Context, name string, shards int) error {
	conn, err := pgx.Connect(ctx, c.Coordinator.URL(name))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if err := schema.Migrate(ctx, conn); err != nil {
		return fmt.Errorf("citustest: %w", err)
	}
	if err := schema.Distribute(ctx, conn, shards); err != nil {
		return fmt.Errorf("citustest: %w", err)
	}
	return nil
}

// Dir is the directory the cluster's files are under.
func (c *Cluster) Dir() string { return c.dir }

// AddWorker starts one more worker and adds it to every database of the
// cluster; its shards come only with a rebalance.
func (c *Cluster) AddWorker(ctx context.Context) (*pgserver.Server, error) {
	w, err := c.startWorker(ctx)
	if err != nil {
		return w, err
	}
	for _, name := range c.databases {
		if err := c.prepareNode(ctx, w, name); err != nil {
			return w, err
		}
		if err := addNode(ctx, c.Coordinator.URL(name), w); err != nil {
			return w, err
		}
	}
	return w, nil
}

func (c *Cluster) startWorker(ctx context.Context) (*pgserver.Server, error) {
	w, err := c.startNode(ctx, "worker"+strconv.Itoa(len(c.Workers)+1))
	if w != nil {
		c.Workers = append(c.Workers, w)
	}
	return w, err
}

func addNode(ctx context.Context, coordinatorURL string, w *pgserver.Server) error {
	return exec(ctx, coordinatorURL, fmt.Sprintf("SELECT citus_add_node(%s, %d)", quote(w.SocketDir()), w.Port()))
}

func (c *Cluster) startNode(ctx context.Context, name string) (*pgserver.Server, error) {
	var log hclog.Logger
	if c.opts.Logger != nil {
		log = c.opts.Logger.Named(name)
	}
	s, err := pgserver.Start(ctx, pgserver.Options{Dir: filepath.Join(c.dir, name), Fast: !c.opts.Durable,
		Settings: append(slices.Clone(settings), c.opts.Settings...), Logger: log})
	if err != nil {
		return s, fmt.Errorf("citustest: %s: %w", name, err)
	}
	// A node reaches itself (the rebalancer's background tasks do) by
	// citus.local_hostname, localhost over TCP by default: here, its socket.
	if err := exec(ctx, s.URL("postgres"), "ALTER SYSTEM SET citus.local_hostname = "+quote(s.SocketDir())); err != nil {
		return s, fmt.Errorf("citustest: %s: %w", name, err)
	}
	if err := exec(ctx, s.URL("postgres"), "SELECT pg_reload_conf()"); err != nil {
		return s, fmt.Errorf("citustest: %s: %w", name, err)
	}
	return s, nil
}

func (c *Cluster) prepareNode(ctx context.Context, s *pgserver.Server, name string) error {
	if err := exec(ctx, s.URL("postgres"), "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("citustest: %w", err)
	}
	if err := exec(ctx, s.URL(name), "CREATE EXTENSION citus"); err != nil {
		return fmt.Errorf("citustest: %w", err)
	}
	return nil
}

// Stop stops every node at once and removes the cluster's files.
func (c *Cluster) Stop() {
	c.stop("immediate", false) //nolint:errcheck // a throwaway cluster
}

// Close stops every node in mode ("fast", "immediate"), workers last, and
// removes the nodes' files unless keep.
func (c *Cluster) Close(mode string, keep bool) error {
	return c.stop(mode, keep)
}

func (c *Cluster) stop(mode string, keep bool) error {
	var errs []error
	for _, s := range c.Nodes() {
		if s == nil {
			continue
		}
		errs = append(errs, s.Stop(mode))
		os.RemoveAll(s.SocketDir())
		if base := filepath.Dir(s.DataDir()); !keep && !strings.HasPrefix(base, c.dir) {
			os.RemoveAll(base) // pgserver's fallback under /var/tmp
		}
	}
	if !keep && c.ownDir {
		os.RemoveAll(c.dir)
	}
	return errors.Join(errs...)
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

// PartitionsOn names the partitions of queue whose shard is placed on
// worker, as db (a connection or pool to the coordinator) reads them.
func PartitionsOn(ctx context.Context, db interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, queue string, worker *pgserver.Server) (map[string]bool, error) {
	rows, err := db.Query(ctx, `SELECT n.name FROM queenside.partition_names n
		JOIN queenside.queues q ON q.id = n.queue_id
		JOIN pg_dist_shard_placement p ON p.shardid = get_shard_id_for_distribution_column('queenside.partitions', n.id)
		WHERE q.name = $1 AND p.nodename = $2`, queue, worker.SocketDir())
	if err != nil {
		return nil, err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	on := map[string]bool{}
	for _, name := range names {
		on[name] = true
	}
	return on, nil
}
