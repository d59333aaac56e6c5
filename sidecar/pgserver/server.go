package pgserver

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/hashicorp/go-hclog"
)

// Options configure Start.
type Options struct {
	// Dir is the working directory; the cluster lives in Dir/pgdata and the
	// server log in Dir/postgres.log. It is created if missing, and a
	// cluster already in it is reused rather than initialised again. When
	// running as root and the postgres user cannot reach Dir, the cluster
	// goes under /var/tmp instead (see DataDir).
	Dir string
	// Fast trades durability for speed, for tests: fsync, synchronous_commit
	// and full_page_writes off. The default keeps PostgreSQL's durable
	// settings, so fault-injection runs see real crash behaviour.
	Fast bool
	// Settings are more server settings, each "name=value" (for instance
	// wal_log_hints=on, which pg_rewind needs).
	Settings []string
	// NetNS, when set, is a network namespace (sidecar/netns) the server
	// runs in: it is reached over TCP at ListenAddress there, and over its
	// Unix socket, which the filesystem carries across namespaces.
	NetNS string
	// ListenAddress is an address the server also takes TCP connections
	// on; "" for none (trust authentication: only inside a namespace of
	// the caller's making is TCP safe).
	ListenAddress string
	// Logger receives progress messages; nil discards them.
	Logger hclog.Logger
}

// Server is a local PostgreSQL server reachable over a Unix socket. Its
// methods may be called from several goroutines.
type Server struct {
	opts    Options
	log     hclog.Logger
	ra      *runAs
	bin     *binaries
	pgdata  string
	logFile string
	sockDir string

	mu sync.Mutex // serialises Stop and Restart
}

// Start initialises a cluster in opts.Dir if there is none, starts it, and
// returns once it accepts connections. If a server from an earlier run is
// still running on the cluster it is stopped (fast) first, so the new one
// gets a fresh socket directory that this process knows.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if opts.Dir == "" {
		return nil, fmt.Errorf("pgserver: Options.Dir is required")
	}
	s := &Server{opts: opts, log: opts.Logger}
	if s.log == nil {
		s.log = hclog.NewNullLogger()
	}
	if err := s.start(ctx); err != nil {
		return nil, fmt.Errorf("pgserver: %w", err)
	}
	return s, nil
}

func (s *Server) start(ctx context.Context) error {
	dir, err := filepath.Abs(s.opts.Dir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if s.ra, err = newRunAs(); err != nil {
		return err
	}
	base, err := baseDir(dir, s.ra, s.log)
	if err != nil {
		return err
	}
	s.pgdata = filepath.Join(base, "pgdata")
	s.logFile = filepath.Join(base, "postgres.log")

	exists, major, err := hasCluster(s.pgdata)
	if err != nil {
		return err
	}
	if s.bin, err = findBinaries(major); err != nil {
		return err
	}

	if exists {
		if err := s.checkOwner(); err != nil {
			return err
		}
		if err := s.stopPrevious(ctx); err != nil {
			return err
		}
	} else {
		// Create pgdata ourselves, private as PostgreSQL demands, so that as
		// root it can be given to postgres: initdb running as postgres may
		// not be allowed to create it in a root-owned directory.
		if err := os.MkdirAll(s.pgdata, 0o700); err != nil {
			return err
		}
		if err := s.ra.chown(s.pgdata); err != nil {
			return err
		}
		if err := s.initdb(ctx); err != nil {
			return err
		}
	}

	if s.sockDir, err = makeSocketDir(s.ra); err != nil {
		return err
	}
	if err := s.trustLinks(); err != nil {
		return err
	}
	if err := s.pgCtlStart(ctx); err != nil {
		os.RemoveAll(s.sockDir)
		return err
	}
	s.log.Info("PostgreSQL running", "pgdata", s.pgdata, "socket_dir", s.sockDir, "log", s.logFile)
	return nil
}

// checkOwner turns PostgreSQL's refusal to use a data directory owned by
// another user (say, one made by a non-root run and now used as root) into
// an error that says what is wrong before anything is started.
func (s *Server) checkOwner() error {
	ok, err := s.ra.ownedByServerUser(s.pgdata)
	if err != nil {
		return err
	}
	if !ok {
		who := "the current user"
		if s.ra.user != "" {
			who = "user " + s.ra.user
		}
		return fmt.Errorf("existing cluster %s is not owned by %s; remove it or run as its owner", s.pgdata, who)
	}
	return nil
}

// stopPrevious stops a server left running on the cluster by an earlier
// run (queenside dev leaves it up on purpose) and removes its socket
// directory, which would otherwise be left behind in /tmp.
func (s *Server) stopPrevious(ctx context.Context) error {
	up, err := s.running(ctx)
	if err != nil || !up {
		return err
	}
	old := pidFileSocketDir(s.pgdata)
	s.log.Info("stopping PostgreSQL left running by a previous run", "pgdata", s.pgdata, "socket_dir", old)
	if err := s.pgCtlStop(ctx, "fast"); err != nil {
		return err
	}
	if old != "" && isOurSocketDir(old) {
		os.Remove(old) // only if empty: a clean shutdown removed the socket files
	}
	return nil
}

// URL returns a pgx connection string for dbname as user postgres over the
// server's Unix socket.
func (s *Server) URL(dbname string) string { return s.URLAt(s.sockDir, dbname) }

// URLAt is URL over TCP to host, an address the server listens on (see
// Options.NetNS), or over a Unix socket in directory host.
func (s *Server) URLAt(host, dbname string) string {
	q := url.Values{}
	q.Set("host", host)
	q.Set("port", strconv.Itoa(port))
	q.Set("sslmode", "disable")
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User("postgres"),
		Path:     "/" + dbname,
		RawQuery: q.Encode(),
	}
	return u.String()
}

// DataDir returns the cluster's data directory. It is under Options.Dir
// unless the root fallback moved it to /var/tmp.
func (s *Server) DataDir() string { return s.pgdata }

// LogFile returns the path of the server log.
func (s *Server) LogFile() string { return s.logFile }

// SocketDir returns the directory holding the server's Unix socket.
func (s *Server) SocketDir() string { return s.sockDir }

// Port returns the port the server's socket is named by.
func (s *Server) Port() int { return port }

// Stop stops the server with pg_ctl's shutdown mode ("smart", "fast" or
// "immediate") and waits for it to exit. Stopping a server that is not
// running is not an error, so cleanup paths can call it unconditionally.
// Only pg_ctl and the data directory are involved, so it works whichever
// process started the server.
func (s *Server) Stop(mode string) error {
	switch mode {
	case "smart", "fast", "immediate":
	default:
		return fmt.Errorf("pgserver: unknown stop mode %q (want smart, fast or immediate)", mode)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ctx := context.Background()
	up, err := s.running(ctx)
	if err == nil && up {
		err = s.pgCtlStop(ctx, mode)
	}
	if err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	// Do not leave a directory per run in /tmp; Restart recreates it.
	os.RemoveAll(s.sockDir)
	return nil
}

// Restart starts the server again after Stop, with the same data
// directory, socket directory and port, so URLs obtained earlier work
// again. It returns once the server accepts connections, which after an
// immediate stop includes crash recovery.
func (s *Server) Restart(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := ensureSocketDir(s.ra, s.sockDir); err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	if err := s.pgCtlStart(ctx); err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	return nil
}
