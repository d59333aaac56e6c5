package verify

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"

	"github.com/queenside/queenside/sidecar/citustest"
	"github.com/queenside/queenside/sidecar/pgserver"
)

// verifyDatabase is the database created in the run's own server.
const verifyDatabase = "queenside_verify"

// cluster is what a run starts: PostgreSQL, or a Citus cluster, and the
// sidecars on it.
type cluster struct {
	log     hclog.Logger
	tmp     string             // PostgreSQL's cluster (or Citus's), sockets, spools, sidecar logs
	dirs    []string           // removed at close: tmp, and where pgserver may have moved the cluster
	pg      *pgserver.Server   // the primary, or the Citus coordinator
	standby *pgserver.Server   // its synchronous standby, when the run has failovers
	citus   *citustest.Cluster // the Citus cluster pg is the coordinator of, with --citus
	dbURL   string             // over the Unix sockets: the verifier's own connections, and the sidecars' without net
	// net carries the sidecars' connections when the run has partition
	// faults; netSkip says why there is none though the run has them.
	net     *sidecarNet
	netSkip string
	// volumes are the small filesystems (tmpfs) holding each sidecar's
	// spool when the run has spool-disk-full faults; volumeSkip says why
	// there are none though the run has them.
	volumes    []string
	volumeSkip string
	sidecars   []*sidecar
	version    string
	pgDown     atomic.Bool // PostgreSQL is stopped on purpose
}

// startCluster starts PostgreSQL, or Citus, with its durable defaults and
// the sidecars. On error it stops what it had started.
func startCluster(ctx context.Context, cfg Config, log hclog.Logger) (c *cluster, err error) {
	c = &cluster{log: log}
	defer func() {
		if err != nil {
			c.close(false) //nolint:errcheck // the start-up error says more
		}
	}()
	// Under /tmp and reachable by all: as root, PostgreSQL runs as the
	// postgres user and must get into it (MkdirTemp makes it 0700).
	if c.tmp, err = os.MkdirTemp("/tmp", "qsverify-"); err != nil {
		return c, err
	}
	c.dirs = append(c.dirs, c.tmp)
	if err = os.Chmod(c.tmp, 0o755); err != nil {
		return c, err
	}
	if err = c.makeNet(cfg); err != nil {
		return c, err
	}
	if cfg.Citus {
		err = c.startCitus(ctx, cfg)
	} else {
		err = c.startPostgres(ctx, cfg)
	}
	if err != nil {
		return c, err
	}
	if err = c.makeVolumes(cfg); err != nil {
		return c, err
	}
	for i := range cfg.Sidecars {
		s, err := newSidecar(i, cfg.SidecarBinary, c.sidecarURL(i), c.tmp, cfg.DatabaseTimeout)
		if err != nil {
			return c, err
		}
		if c.volumes != nil {
			s.spoolDir = filepath.Join(c.volumes[i], "spool")
		}
		c.sidecars = append(c.sidecars, s)
		// One at a time: the first applies the migrations.
		if c.version, err = s.start(ctx, false); err != nil {
			return c, err
		}
	}
	return c, nil
}

// startPostgres starts one PostgreSQL with the verify database, and its
// synchronous standby when the run has failovers.
func (c *cluster) startPostgres(ctx context.Context, cfg Config) error {
	failovers, err := cfg.hasFailovers()
	if err != nil {
		return err
	}
	c.log.Info("starting PostgreSQL", "dir", c.tmp, "standby", failovers)
	var settings []string
	if failovers {
		// pg_rewind needs hint bits logged on the server it rewinds, and
		// its WAL back to the checkpoint before the two diverged; the
		// rewound server then streams the new primary's WAL from there.
		// After a long outage the spools' replay writes more than 512 MB
		// of WAL before the old primary is back: 2 GB is kept.
		settings = []string{"wal_log_hints=on", "wal_keep_size=2GB"}
	}
	settings = append(settings, cfg.PGSettings...)
	opts := pgserver.Options{Dir: filepath.Join(c.tmp, "pg"), Settings: settings, Logger: c.log.Named("postgres")}
	if c.net != nil {
		opts = c.net.primaryOptions(opts)
	}
	c.pg, err = pgserver.Start(ctx, opts)
	if err != nil {
		return fmt.Errorf("start PostgreSQL: %w", err)
	}
	if base := filepath.Dir(c.pg.DataDir()); base != filepath.Join(c.tmp, "pg") {
		c.dirs = append(c.dirs, base) // pgserver's fallback for a directory postgres cannot reach
	}
	if err = createDatabase(ctx, c.pg.URL("postgres"), verifyDatabase); err != nil {
		return err
	}
	c.dbURL = c.pg.URL(verifyDatabase)
	if !failovers {
		return nil
	}
	opts = pgserver.Options{Dir: filepath.Join(c.tmp, "standby"), Settings: settings, Logger: c.log.Named("standby")}
	if c.net != nil {
		opts = c.net.standbyOptions(opts)
	}
	c.standby, err = pgserver.StartStandby(ctx, c.pg, opts)
	if err != nil {
		return fmt.Errorf("start the standby: %w", err)
	}
	if base := filepath.Dir(c.standby.DataDir()); base != filepath.Join(c.tmp, "standby") {
		c.dirs = append(c.dirs, base)
	}
	if err = c.pg.RequireSynchronousStandby(ctx); err != nil {
		return err
	}
	c.dbURL = multiHostURL(verifyDatabase, c.pg, c.standby)
	return nil
}

// startCitus starts a Citus coordinator and cfg.CitusWorkers workers with
// the durable defaults, makes the verify database on every node, and
// migrates and distributes the schema before any sidecar starts: a sidecar
// only migrates, and would leave every table on the coordinator.
func (c *cluster) startCitus(ctx context.Context, cfg Config) error {
	c.log.Info("starting Citus", "dir", c.tmp, "workers", cfg.CitusWorkers)
	var err error
	c.citus, err = citustest.StartCluster(ctx, citustest.Options{Workers: cfg.CitusWorkers, Dir: filepath.Join(c.tmp, "citus"),
		Durable: true, Settings: cfg.PGSettings, Logger: c.log.Named("citus")})
	if err != nil {
		return fmt.Errorf("start Citus: %w", err)
	}
	c.pg = c.citus.Coordinator
	if err := c.citus.CreateDatabase(ctx, verifyDatabase); err != nil {
		return err
	}
	c.dbURL = c.pg.URL(verifyDatabase)
	if err := c.citus.Migrate(ctx, verifyDatabase, 0); err != nil {
		return err
	}
	if c.net == nil {
		return nil
	}
	// citustest starts its nodes on their Unix sockets alone: the
	// coordinator moves into the namespace, where the sidecars reach it
	// over their links. It reaches its workers, and they it, over their
	// sockets (the nodes' names in Citus's metadata), which stay.
	if err := c.pg.Stop("fast"); err != nil {
		return err
	}
	if err := c.pg.SetNetwork(c.net.ns.Name(), c.net.primaryListen()); err != nil {
		return err
	}
	return c.pg.Restart(ctx)
}

// makeNet makes the network namespace and links of a run with partition
// faults. Where namespaces cannot be made, the run goes on without them
// and netSkip says why: its partition faults are skipped, not failed.
func (c *cluster) makeNet(cfg Config) error {
	partitions, err := cfg.hasPartitions()
	if err != nil || !partitions {
		return err
	}
	failovers, err := cfg.hasFailovers()
	if err != nil {
		return err
	}
	if c.net, err = newSidecarNet(cfg.Sidecars, failovers && !cfg.Citus); err != nil {
		c.netSkip = "PostgreSQL cannot be put in a network namespace of its own here: " + err.Error()
	}
	return nil
}

// sidecarURL is sidecar i's database URL: over its own link when the run
// has one, else over the Unix sockets.
func (c *cluster) sidecarURL(i int) string {
	if c.net == nil {
		return c.dbURL
	}
	return c.net.url(i, verifyDatabase, c.pg.Port())
}

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

// close stops the sidecars (a drain each) and then PostgreSQL (every Citus
// node), and removes the temporary directory unless keep is set or stopping
// failed. It does not depend on the run's context, so it also cleans up
// after a Ctrl-C.
func (c *cluster) close(keep bool) error {
	var errs []error
	for _, s := range c.sidecars {
		if s.up() {
			if _, _, err := s.stop(context.Background(), syscall.SIGTERM); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", s, err))
			}
		}
	}
	switch {
	case c.citus != nil:
		c.log.Info("stopping Citus")
		errs = append(errs, c.citus.Close("fast", keep))
	case c.pg != nil:
		c.log.Info("stopping PostgreSQL")
		errs = append(errs, c.pg.Stop("fast"))
	}
	if c.standby != nil {
		errs = append(errs, c.standby.Stop("fast"))
	}
	// The servers in the namespace have stopped: nothing holds it now.
	errs = append(errs, c.net.close())
	if keep {
		if len(c.volumes) > 0 {
			c.log.Info("the spool volumes stay mounted; unmount them when done", "volumes", c.volumes)
		}
	} else {
		errs = append(errs, c.unmountVolumes())
	}
	if keep || errors.Join(errs...) != nil {
		return errors.Join(errs...)
	}
	for _, d := range c.dirs {
		errs = append(errs, os.RemoveAll(d))
	}
	return errors.Join(errs...)
}

// healthyAll waits until every sidecar answers health ok, for up to wait.
func (c *cluster) healthyAll(ctx context.Context, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for _, s := range c.sidecars {
		for {
			h, err := healthOnce(ctx, s.socket)
			if err == nil && h.Status == "ok" {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s not healthy after %v", s, wait)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

// spoolRecords samples every sidecar and returns the records waiting in
// their spools.
func (c *cluster) spoolRecords(ctx context.Context) int64 {
	var n int64
	for _, s := range c.sidecars {
		s.sample(ctx) //nolint:errcheck // a sidecar that does not answer keeps its last sample
		n += s.spool().Records
	}
	return n
}

// multiHostURL names every server, the one accepting writes to be used, as
// libpq's multi-host form does.
func multiHostURL(database string, servers ...*pgserver.Server) string {
	hosts := make([]string, len(servers))
	for i, s := range servers {
		hosts[i] = s.SocketDir()
	}
	return hostsURL(database, servers[0].Port(), hosts)
}

// volumeBytes is the size of each spool volume: far more than a sidecar
// spools in an outage of the run, so that only the fault fills it.
const volumeBytes = 64 << 20

// makeVolumes mounts a tmpfs of volumeBytes for each sidecar's spool when
// the run has spool-disk-full faults. Where it cannot (without root), the
// run goes on with the spools in the temporary directory, and volumeSkip
// says why: those faults are skipped, not failed.
func (c *cluster) makeVolumes(cfg Config) error {
	full, err := cfg.schedules(FaultSpoolDiskFull)
	if err != nil || !full {
		return err
	}
	for i := range cfg.Sidecars {
		dir := filepath.Join(c.tmp, "sidecar"+strconv.Itoa(i)+"-volume")
		if err := os.Mkdir(dir, 0o700); err != nil {
			return err
		}
		if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+strconv.Itoa(volumeBytes)+",mode=0700"); err != nil {
			c.volumeSkip = "a small filesystem for the spool cannot be mounted here: " + err.Error()
			return c.unmountVolumes()
		}
		c.volumes = append(c.volumes, dir)
	}
	return nil
}

func (c *cluster) unmountVolumes() error {
	var errs []error
	for _, dir := range c.volumes {
		if err := syscall.Unmount(dir, 0); err != nil {
			errs = append(errs, fmt.Errorf("unmount %s: %w", dir, err))
		}
	}
	c.volumes = nil
	return errors.Join(errs...)
}
