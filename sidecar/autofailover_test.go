package sidecar

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pg_auto_failover (pg_autoctl): a monitor and two PostgreSQL nodes, as
// Debian's postgresql-15-auto-failover runs them. The monitor notices a dead
// primary and promotes the secondary on its own.

type autoFailover struct {
	t       *testing.T
	dir     string
	env     []string // XDG directories of the test's own
	pgCtl   string
	monPort int
	nodes   map[string]*exec.Cmd // pg_autoctl run, by pgdata
	mu      sync.Mutex
}

func newAutoFailover(t *testing.T) *autoFailover {
	t.Helper()
	if _, err := exec.LookPath("pg_autoctl"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("pg_autoctl is required in CI: %v", err)
		}
		t.Skip("pg_auto_failover is not installed (apt install postgresql-15-auto-failover); .ci/run installs it")
	}
	pgCtl, err := exec.LookPath("pg_ctl")
	if err != nil {
		found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
		if len(found) == 0 {
			t.Fatal("pg_ctl not found")
		}
		pgCtl = found[len(found)-1]
	}
	// pg_autoctl looks for pg_controldata and the rest beside pg_ctl, so
	// it needs the distribution's directory, not a symlink to it.
	if real, err := filepath.EvalSymlinks(pgCtl); err == nil {
		pgCtl = real
	}
	dir, err := os.MkdirTemp("", "qspaf")
	if err != nil {
		t.Fatal(err)
	}
	a := &autoFailover{t: t, dir: dir, pgCtl: pgCtl, nodes: map[string]*exec.Cmd{},
		env: []string{"XDG_CONFIG_HOME=" + filepath.Join(dir, "config"), "XDG_DATA_HOME=" + filepath.Join(dir, "data")}}
	if os.Geteuid() == 0 { // pg_autoctl runs PostgreSQL, which refuses root
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatal(err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		for pgdata, cmd := range a.nodes {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) //nolint:errcheck // gone already is fine
			cmd.Wait()                                      //nolint:errcheck // killed
			a.killPostgres(pgdata)
			if t.Failed() {
				log, _ := os.ReadFile(pgdata + ".log")
				t.Logf("pg_autoctl %s:\n%s", filepath.Base(pgdata), tail(string(log), 3000))
			}
		}
		os.RemoveAll(dir)
	})
	return a
}

func tail(s string, n int) string { return s[max(0, len(s)-n):] }

// command runs pg_autoctl as the postgres user when we are root.
func (a *autoFailover) command(args ...string) *exec.Cmd {
	full := append(append([]string{"env"}, a.env...), append([]string{"pg_autoctl"}, args...)...)
	var cmd *exec.Cmd
	if os.Geteuid() == 0 {
		cmd = exec.Command("runuser", append([]string{"-u", "postgres", "--"}, full...)...)
	} else {
		cmd = exec.Command(full[0], full[1:]...)
	}
	cmd.Dir = a.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

// run starts `pg_autoctl create ... --run` for a node and keeps it running.
func (a *autoFailover) run(pgdata string, args ...string) {
	a.t.Helper()
	log, err := os.Create(pgdata + ".log")
	if err != nil {
		a.t.Fatal(err)
	}
	defer log.Close()
	cmd := a.command(args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		a.t.Fatal(err)
	}
	a.mu.Lock()
	a.nodes[pgdata] = cmd
	a.mu.Unlock()
}

// start creates and runs the monitor, then two nodes, and returns the
// formation's URI.
func (a *autoFailover) start() string {
	a.t.Helper()
	a.monPort = freePort(a.t)
	mon := filepath.Join(a.dir, "monitor")
	a.run(mon, "create", "monitor", "--pgctl", a.pgCtl, "--pgdata", mon, "--pgport", strconv.Itoa(a.monPort),
		"--hostname", "localhost", "--auth", "trust", "--no-ssl", "--run")
	waitFor(a.t, 60*time.Second, "the monitor", func() bool {
		conn, err := pgx.Connect(context.Background(), a.monitorURL())
		if err != nil {
			return false
		}
		conn.Close(context.Background())
		return true
	})
	// Fast failure detection, for the test: health checks every second,
	// a node unhealthy after 2 s without answering.
	for _, setting := range []string{"health_check_period = 1000", "health_check_timeout = 1000",
		"health_check_max_retries = 1", "health_check_retry_delay = 500",
		"node_considered_unhealthy_timeout = 2000", "primary_demote_timeout = 2000"} {
		a.monitorExec("ALTER SYSTEM SET pgautofailover." + setting)
	}
	a.monitorExec("SELECT pg_reload_conf()")
	for i := 1; i <= 2; i++ {
		pgdata := filepath.Join(a.dir, fmt.Sprintf("node%d", i))
		a.run(pgdata, "create", "postgres", "--pgctl", a.pgCtl, "--pgdata", pgdata, "--pgport", strconv.Itoa(freePort(a.t)),
			"--hostname", "localhost", "--auth", "trust", "--no-ssl", "--name", fmt.Sprintf("node%d", i),
			"--monitor", fmt.Sprintf("postgres://autoctl_node@localhost:%d/pg_auto_failover?sslmode=disable", a.monPort), "--run")
		if i == 1 {
			a.waitState("node1", "single") // primary once a secondary joins
		}
	}
	a.waitState("node1", "primary")
	a.waitState("node2", "secondary")
	out, err := a.command("show", "uri", "--formation", "default", "--pgdata", mon).Output()
	if err != nil {
		a.t.Fatalf("pg_autoctl show uri: %v", err)
	}
	uri := strings.Replace(strings.TrimSpace(string(out)), "sslmode=prefer", "sslmode=disable", 1)
	return strings.Replace(uri, "postgres://", "postgres://postgres@", 1) // the URI names no user
}

func (a *autoFailover) monitorURL() string {
	return fmt.Sprintf("postgres://postgres@localhost:%d/pg_auto_failover?sslmode=disable", a.monPort)
}

func (a *autoFailover) monitorExec(sql string) {
	a.t.Helper()
	conn, err := pgx.Connect(context.Background(), a.monitorURL())
	if err != nil {
		a.t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), sql); err != nil {
		a.t.Fatalf("%s: %v", sql, err)
	}
}

// state is a node's reported and assigned state, from the monitor.
func (a *autoFailover) state(node string) (reported, assigned string) {
	conn, err := pgx.Connect(context.Background(), a.monitorURL())
	if err != nil {
		return "", ""
	}
	defer conn.Close(context.Background())
	conn.QueryRow(context.Background(), //nolint:errcheck // empty answers wait on
		"SELECT reportedstate::text, goalstate::text FROM pgautofailover.node WHERE nodename = $1", node).Scan(&reported, &assigned)
	return reported, assigned
}

func (a *autoFailover) waitState(node string, states ...string) {
	a.t.Helper()
	waitFor(a.t, 90*time.Second, node+" to be "+strings.Join(states, " or "), func() bool {
		reported, assigned := a.state(node)
		for _, s := range states {
			if reported == s && assigned == s {
				return true
			}
		}
		return false
	})
}

// kill ends a node as a pod's death would: its pg_autoctl and its
// PostgreSQL, with SIGKILL.
func (a *autoFailover) kill(node string) {
	a.t.Helper()
	pgdata := filepath.Join(a.dir, node)
	a.mu.Lock()
	cmd := a.nodes[pgdata]
	delete(a.nodes, pgdata)
	a.mu.Unlock()
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) //nolint:errcheck // gone already is fine
	cmd.Wait()                                      //nolint:errcheck // killed
	a.killPostgres(pgdata)
}

// killPostgres SIGKILLs the postmaster of pgdata, which pg_ctl started in
// a session of its own, and so outlives its pg_autoctl.
func (a *autoFailover) killPostgres(pgdata string) {
	b, err := os.ReadFile(filepath.Join(pgdata, "postmaster.pid"))
	if err != nil {
		return
	}
	if pid, err := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0]); err == nil {
		syscall.Kill(pid, syscall.SIGKILL) //nolint:errcheck // gone already is fine
	}
}

// restart runs a killed node's pg_autoctl again: it rejoins the formation.
func (a *autoFailover) restart(node string) {
	a.t.Helper()
	pgdata := filepath.Join(a.dir, node)
	a.run(pgdata, "run", "--pgdata", pgdata)
}

func TestPgAutoFailoverPromotesAndTheSidecarsFollow(t *testing.T) {
	af := newAutoFailover(t)
	uri := af.start()
	t.Logf("formation URI: %s", uri)
	dbURL := uri + "&connect_timeout=2"
	sidecars := []*sidecarProcess{launchSidecar(t, dbURL, t.TempDir()), launchSidecar(t, dbURL, t.TempDir())}
	for _, sc := range sidecars {
		sc.waitReplayed(t)
	}
	tr := startTraffic(t, "af", sidecars)
	tr.push(10)

	// The primary's pod dies; pg_auto_failover promotes the secondary.
	var pushing sync.WaitGroup
	pushing.Go(func() { tr.push(150) })
	time.Sleep(300 * time.Millisecond)
	killed := time.Now()
	af.kill("node1")
	af.waitState("node2", "wait_primary", "primary")
	promoted := time.Since(killed)
	pushing.Wait()
	for _, sc := range sidecars {
		sc.waitReplayed(t)
	}
	tr.push(10)

	// The dead node comes back and rejoins as the secondary.
	af.restart("node1")
	af.waitState("node1", "secondary")
	tr.push(10)

	pool, err := pgxpool.New(context.Background(), uri)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	tr.finish(pool)
	for i, p := range tr.producers {
		c := tr.consumers[i]
		spooled := within(p.spooled, killed, time.Now())
		if len(spooled) == 0 {
			t.Errorf("%s: no push was answered buffered during the failover", p.queue)
			continue
		}
		t.Logf("%s: %d pushed, all stored and delivered once in order; pushes answered buffered from %.1f to %.1f s after the kill; pops failed %s",
			p.queue, p.pushed, spooled[0].Sub(killed).Seconds(), spooled[len(spooled)-1].Sub(killed).Seconds(), span(within(c.failed, killed, time.Now()), killed))
	}
	t.Logf("node2 assigned primary %.1f s after node1 was killed", promoted.Seconds())
}
