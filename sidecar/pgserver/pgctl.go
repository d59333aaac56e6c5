package pgserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// defaultWait bounds starting and stopping when the caller's context has no
// deadline. Crash recovery after an immediate stop of a busy server can take
// a while, hence not the 60 s pg_ctl would pick.
const defaultWait = 2 * time.Minute

// port is fixed: the socket directory is unique per server, so servers do
// not collide on it, and a predictable port keeps URLs simple.
const port = 5432

// hasCluster reports whether pgdata already holds a cluster (initdb writes
// PG_VERSION) and returns its major version.
func hasCluster(pgdata string) (bool, int, error) {
	b, err := os.ReadFile(filepath.Join(pgdata, "PG_VERSION"))
	if errors.Is(err, os.ErrNotExist) {
		return false, 0, nil
	}
	if err != nil {
		return false, 0, fmt.Errorf("inspecting existing cluster: %w", err)
	}
	return true, parseMajor(string(b)), nil
}

// initdb creates the cluster. Trust authentication and the postgres
// superuser are what a local throwaway server wants; the C locale and UTF8
// make behaviour independent of the machine's locale settings. --no-sync
// skips fsyncing the new files when durability is not wanted anyway.
func (s *Server) initdb(ctx context.Context) error {
	args := []string{"-D", s.pgdata, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C"}
	if s.opts.Fast {
		args = append(args, "--no-sync")
	}
	s.log.Info("creating PostgreSQL cluster", "pgdata", s.pgdata, "initdb", s.bin.initdb)
	out, err := s.ra.command(ctx, s.bin.initdb, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("initdb %s: %w\n%s", s.pgdata, err, strings.TrimSpace(string(out)))
	}
	if len(s.opts.Settings) == 0 {
		return nil
	}
	// In the configuration file too, not only on the command line: tools
	// that start the server themselves (pg_rewind's crash recovery) and
	// standbys copied from it see them there.
	f, err := os.OpenFile(filepath.Join(s.pgdata, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = fmt.Fprintf(f, "\n%s\n", strings.Join(s.opts.Settings, "\n"))
	return err
}

// running reports whether a postmaster is alive on pgdata. pg_ctl status
// checks the PID in postmaster.pid, so a stale file left by a crash or a
// reboot reads as not running.
func (s *Server) running(ctx context.Context) (bool, error) {
	out, err := s.ra.command(ctx, s.bin.pgCtl, "status", "-D", s.pgdata).CombinedOutput()
	if err == nil {
		return true, nil
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		switch ee.ExitCode() {
		case 3: // not running
			return false, nil
		case 4: // no accessible data directory: if it is gone, nothing runs on it
			if _, serr := os.Stat(s.pgdata); errors.Is(serr, os.ErrNotExist) {
				return false, nil
			}
		}
	}
	return false, fmt.Errorf("pg_ctl status -D %s: %w\n%s", s.pgdata, err, strings.TrimSpace(string(out)))
}

// serverOptions are the postgres command-line settings. pg_ctl pastes -o
// into a /bin/sh command line, so every value is shell-quoted.
func (s *Server) serverOptions() string {
	opts := []string{
		// No TCP by default: nothing outside this machine may connect to a
		// trust-auth server.
		"-c", shellQuote("listen_addresses=" + s.opts.ListenAddress),
		"-k", shellQuote(s.sockDir),
		"-p", strconv.Itoa(port),
		"-c", "max_connections=300", // parallel tests each hold pools
	}
	for _, setting := range s.opts.Settings {
		opts = append(opts, "-c", shellQuote(setting))
	}
	if s.opts.Fast {
		opts = append(opts,
			"-c", "fsync=off",
			"-c", "synchronous_commit=off",
			"-c", "full_page_writes=off",
		)
	}
	return strings.Join(opts, " ")
}

// pgCtlStart starts the postmaster and waits until it accepts connections.
// On failure the error carries what this attempt wrote to the server log,
// which is where PostgreSQL says why it would not start.
func (s *Server) pgCtlStart(ctx context.Context) error {
	if err := s.prepareLog(); err != nil {
		return err
	}
	from := logSize(s.logFile)
	args := []string{"start", "-w", "-t", waitSeconds(ctx), "-D", s.pgdata, "-l", s.logFile, "-o", s.serverOptions()}
	s.log.Debug("starting PostgreSQL", "pgdata", s.pgdata, "socket_dir", s.sockDir)
	cmd := s.ra.command(ctx, s.bin.pgCtl, args...)
	if s.opts.NetNS != "" {
		// The postmaster pg_ctl starts inherits the namespace.
		cmd.Args = append([]string{"ip", "netns", "exec", s.opts.NetNS}, cmd.Args...)
		ip, err := exec.LookPath("ip")
		if err != nil {
			return fmt.Errorf("a server in network namespace %s needs ip (iproute2): %w", s.opts.NetNS, err)
		}
		cmd.Path = ip
	}
	out, err := cmd.CombinedOutput()
	if err == nil {
		err = s.waitReady(ctx)
	}
	if err != nil {
		return fmt.Errorf("starting PostgreSQL (pgdata %s): %w\npg_ctl: %s\nserver log %s:\n%s",
			s.pgdata, err, strings.TrimSpace(string(out)), s.logFile, logTail(s.logFile, from))
	}
	return nil
}

// trustLinks lets clients on the networks the server is directly on (its
// namespace's links) in, as the Unix socket's are: only a server with a
// ListenAddress, which only a namespace of the caller's makes safe.
func (s *Server) trustLinks() error {
	if s.opts.ListenAddress == "" {
		return nil
	}
	const line = "host all all samenet trust"
	hba := filepath.Join(s.pgdata, "pg_hba.conf")
	b, err := os.ReadFile(hba)
	if err != nil {
		return err
	}
	if strings.Contains(string(b), line) {
		return nil
	}
	f, err := os.OpenFile(hba, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = fmt.Fprintf(f, "\n%s\n", line)
	return err
}

// prepareLog creates the log file ahead of pg_ctl so that, as root, it can
// be handed to postgres: the server user may not be allowed to create files
// in the directory that holds it.
func (s *Server) prepareLog() error {
	f, err := os.OpenFile(s.logFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("creating server log: %w", err)
	}
	f.Close()
	return s.ra.chown(s.logFile)
}

// pgCtlStop stops the postmaster and waits for it to exit.
func (s *Server) pgCtlStop(ctx context.Context, mode string) error {
	args := []string{"stop", "-w", "-t", waitSeconds(ctx), "-D", s.pgdata, "-m", mode}
	out, err := s.ra.command(ctx, s.bin.pgCtl, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl stop -m %s -D %s: %w\n%s", mode, s.pgdata, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// pidFileSocketDir reads the socket directory a running postmaster recorded
// in postmaster.pid (line 5), so a previous run's directory can be removed.
func pidFileSocketDir(pgdata string) string {
	f, err := os.Open(filepath.Join(pgdata, "postmaster.pid"))
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for i := 1; sc.Scan(); i++ {
		if i == 5 {
			return strings.TrimSpace(sc.Text())
		}
	}
	return ""
}

// waitSeconds turns the context deadline into pg_ctl's -t argument.
func waitSeconds(ctx context.Context) string {
	d := defaultWait
	if dl, ok := ctx.Deadline(); ok {
		d = time.Until(dl)
	}
	return strconv.Itoa(int(math.Max(1, math.Ceil(d.Seconds()))))
}

// shellQuote quotes s for /bin/sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
