package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/queenside/queenside/sidecar/crypt"
	"github.com/queenside/queenside/sidecar/pgserver"
)

// Waits of start-up and shutdown. The sidecar's own drain grace is 25 s,
// so stopping waits a little longer before it kills.
const (
	healthyTimeout = 60 * time.Second // a started sidecar: migrations may run first
	givenTimeout   = 5 * time.Second  // a given one should already be serving
	sidecarStop    = 35 * time.Second
)

// environment is what the scenarios run against: a sidecar socket, and
// whatever processes the run started to provide it.
type environment struct {
	log     hclog.Logger
	tmp     string   // holds the cluster, socket, spool and sidecar log
	dirs    []string // removed at close: tmp, and where pgserver may have moved the cluster
	pg      *pgserver.Server
	child   *sidecarProc
	socket  string
	dbURL   string
	probe   *probe
	version string
	pgInfo  *PostgresInfo
	sink    *otlpSink // the OTLP receiver of a run with tracing
}

// setup provides a sidecar as cfg asks: it starts PostgreSQL unless a
// database or a sidecar is given, and the sidecar unless a socket is. On
// error it stops what it had started.
func setup(ctx context.Context, cfg Config, log hclog.Logger) (e *environment, err error) {
	e = &environment{log: log, probe: &probe{hz: float64(ticksPerSecond())}}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	startSidecar := cfg.Socket == ""
	startPostgres := startSidecar && cfg.DatabaseURL == ""
	if startSidecar {
		// Under /tmp and reachable by all: as root, PostgreSQL runs as the
		// postgres user and must get into it (MkdirTemp makes it 0700).
		if e.tmp, err = os.MkdirTemp("/tmp", "qsbench-"); err != nil {
			return e, err
		}
		e.dirs = append(e.dirs, e.tmp)
		if err = os.Chmod(e.tmp, 0o755); err != nil {
			return e, err
		}
	}
	e.dbURL = cfg.DatabaseURL
	if startPostgres {
		if err = e.startPostgres(ctx); err != nil {
			return e, err
		}
	}
	if e.dbURL != "" {
		if e.pgInfo, e.probe.postmasterPID, err = inspectPostgres(ctx, e.dbURL, e.probe.postmasterPID); err != nil {
			return e, err
		}
	}
	if startSidecar && cfg.Tracing {
		if e.sink, err = startOTLPSink(); err != nil {
			return e, fmt.Errorf("start the OTLP receiver: %w", err)
		}
	}
	if startSidecar {
		var extra []string
		if cfg.Encrypt {
			if extra, err = e.writeKeys(); err != nil {
				return e, err
			}
		}
		err = e.startSidecar(ctx, cfg.SidecarBinary, max(cfg.RetentionInterval, 0), extra...)
	} else {
		e.socket, e.probe.sidecarPID = cfg.Socket, cfg.SidecarPID
		e.version, err = e.healthy(ctx, givenTimeout)
	}
	return e, err
}

func (e *environment) startPostgres(ctx context.Context) error {
	e.log.Info("starting PostgreSQL", "dir", e.tmp)
	pg, err := pgserver.Start(ctx, pgserver.Options{Dir: filepath.Join(e.tmp, "pg"), Fast: false, Logger: e.log.Named("postgres")})
	if err != nil {
		return fmt.Errorf("start PostgreSQL: %w", err)
	}
	e.pg = pg
	if base := filepath.Dir(pg.DataDir()); base != filepath.Join(e.tmp, "pg") {
		e.dirs = append(e.dirs, base) // pgserver's fallback for a directory postgres cannot reach
	}
	if err := createDatabase(ctx, pg.URL("postgres"), benchDatabase); err != nil {
		return err
	}
	e.dbURL = pg.URL(benchDatabase)
	pid, err := readPIDFile(filepath.Join(pg.DataDir(), "postmaster.pid"))
	if err != nil {
		e.log.Warn("PostgreSQL CPU will be unknown", "error", err)
	}
	e.probe.postmasterPID = pid
	return nil
}

// startSidecar starts the sidecar as a child; its janitor runs every
// retention (never when 0).
func (e *environment) startSidecar(ctx context.Context, bin string, retention time.Duration, extra ...string) error {
	e.socket = filepath.Join(e.tmp, "qs.sock")
	child, err := startSidecar(bin, e.socket, e.dbURL, filepath.Join(e.tmp, "spool"), filepath.Join(e.tmp, "sidecar.log"), retention, extra...)
	if err != nil {
		return err
	}
	e.child = child
	e.probe.sidecarPID = child.Pid()
	e.version, err = e.healthy(ctx, healthyTimeout)
	return err
}

func (e *environment) healthy(ctx context.Context, timeout time.Duration) (string, error) {
	h, err := waitHealthy(ctx, e.socket, e.child, timeout)
	return h.Version, err
}

// sidecarGone reports a started sidecar that has exited, with its log.
func (e *environment) sidecarGone() error {
	if e.child == nil || !e.child.Exited() {
		return nil
	}
	return fmt.Errorf("the sidecar exited (%v):\n%s", e.child.Err(), e.child.logTail())
}

// sidecarLog returns what the started sidecar logged (warnings and worse).
func (e *environment) sidecarLog() string {
	if e.child == nil {
		return ""
	}
	return e.child.logTail()
}

// close stops what setup started, the sidecar before its database, and
// removes the temporary directory. It runs on every exit path, Ctrl-C
// included, so it does not depend on the run's context.
func (e *environment) close() error {
	var errs []error
	if e.child != nil {
		errs = append(errs, e.child.stop(sidecarStop))
	}
	if e.sink != nil { // after the sidecar, which flushes its spans as it stops
		errs = append(errs, e.sink.close())
	}
	if e.pg != nil {
		e.log.Info("stopping PostgreSQL")
		errs = append(errs, e.pg.Stop("fast"))
	}
	if errors.Join(errs...) == nil { // else keep the files, to see why
		for _, d := range e.dirs {
			errs = append(errs, os.RemoveAll(d))
		}
	}
	return errors.Join(errs...)
}

// writeKeys writes a key file for --encrypt and returns the sidecar's flag.
func (e *environment) writeKeys() ([]string, error) {
	line, err := crypt.NewKeyLine("bench")
	if err != nil {
		return nil, err
	}
	path := filepath.Join(e.tmp, "encryption-keys")
	if err := os.WriteFile(path, []byte(line+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("write the encryption key: %w", err)
	}
	return []string{"--encryption-keys", path}, nil
}
