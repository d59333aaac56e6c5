package sidecar

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/citustest"
	"github.com/queenside/queenside/sidecar/pgserver"
	"github.com/queenside/queenside/sidecar/pgtest"
)

// privatePostgres is a PostgreSQL cluster of the test's own, which it may
// stop (pg_ctl stop -m immediate) and start again. On Citus
// (pgtest.CitusEnv) it is a coordinator, whose workers the test may stop
// too, with the schema distributed over them.
type privatePostgres struct {
	*pgserver.Server
	cluster *citustest.Cluster // on Citus; Server is its coordinator
	url     string
}

func startPrivatePostgres(t *testing.T) *privatePostgres {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// Durable settings: with synchronous_commit off, an immediate stop
	// would lose commits that were already answered queued.
	if pgtest.Citus() {
		c, err := citustest.StartCluster(ctx, citustest.Options{Workers: 2, Durable: true})
		if c != nil {
			t.Cleanup(c.Stop)
		}
		if err == nil {
			err = c.CreateDatabase(ctx, citustest.Database)
		}
		if err == nil {
			err = c.Migrate(ctx, citustest.Database, 0)
		}
		if err != nil {
			t.Fatal(err)
		}
		return &privatePostgres{Server: c.Coordinator, cluster: c, url: c.URL() + "&connect_timeout=2"}
	}
	pg, err := pgserver.Start(ctx, pgserver.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Stop("immediate") }) //nolint:errcheck // best effort
	return &privatePostgres{Server: pg, url: pg.URL("postgres") + "&connect_timeout=2"}
}

func (pg *privatePostgres) stop(t *testing.T) {
	t.Helper()
	if err := pg.Stop("immediate"); err != nil {
		t.Fatal(err)
	}
}

func (pg *privatePostgres) restart(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := pg.Restart(ctx); err != nil {
		t.Fatal(err)
	}
}

func (pg *privatePostgres) pool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(context.Background(), pg.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// sidecarProcess is `queenside serve` as a child process the test may kill.
type sidecarProcess struct {
	cmd      *exec.Cmd
	socket   string
	spoolDir string
	httpAddr string
	log      lockedLog
	exited   chan struct{}
	exitErr  error
	// token, when set, is sent as the bearer token of httpGet (an admin
	// token given with --admin-token-file, for /debug/pprof).
	token string
}

func (p *sidecarProcess) Write(b []byte) (int, error) { return p.log.Write(b) }

func (p *sidecarProcess) logText() string { return p.log.String() }

// launchSidecar starts serve over spoolDir and waits until its socket
// answers, whatever the database does.
func launchSidecar(t *testing.T, dbURL, spoolDir string, extra ...string) *sidecarProcess {
	t.Helper()
	return launchSidecarBinary(t, queensideBinary(t), dbURL, spoolDir, extra...)
}

// launchSidecarBinary is launchSidecar with a binary of the caller's (say,
// an earlier release's).
func launchSidecarBinary(t *testing.T, binary, dbURL, spoolDir string, extra ...string) *sidecarProcess {
	t.Helper()
	p := &sidecarProcess{socket: filepath.Join(shortTempDir(t), "qs.sock"), spoolDir: spoolDir,
		httpAddr: freeAddr(t), exited: make(chan struct{})}
	args := append([]string{"serve", "--socket", p.socket, "--database-url", dbURL, "--spool-dir", spoolDir,
		"--http-addr", p.httpAddr, "--log-level", "info", "--shutdown-grace", "10s"}, extra...)
	p.cmd = exec.Command(binary, args...)
	p.cmd.Stdout, p.cmd.Stderr = p, p
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exitErr = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		p.cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck // may have exited
		<-p.exited
		if t.Failed() {
			t.Logf("sidecar %s log:\n%s", p.socket, p.logText())
		}
	})
	waitFor(t, 20*time.Second, "the sidecar to answer", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		c, err := queenside.Dial(ctx, p.socket)
		if err != nil {
			return false
		}
		defer c.Close()
		_, err = c.Hello(ctx, "test")
		return err == nil
	})
	return p
}

// kill ends the process with SIGKILL, as a crash would.
func (p *sidecarProcess) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-p.exited
}

// terminate sends SIGTERM and waits for the exit, which must come within
// the grace period the harness gives (10 s).
func (p *sidecarProcess) terminate(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		t.Fatal("the sidecar did not exit within its grace period")
	}
}

func (p *sidecarProcess) health(t *testing.T) protocol.HealthResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := queenside.Dial(ctx, p.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h, err := c.Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// waitReplayed waits until the database answers and the spool is empty.
func (p *sidecarProcess) waitReplayed(t *testing.T) {
	t.Helper()
	waitFor(t, 90*time.Second, "the spool to be replayed", func() bool {
		h := p.health(t)
		return h.Status == protocol.HealthOK && h.Spool.Records == 0
	})
}

func (p *sidecarProcess) httpStatus(t *testing.T, path string) int {
	t.Helper()
	cl := http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Get("http://" + p.httpAddr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// httpGet reads a path of the sidecar's HTTP port.
func (p *sidecarProcess) httpGet(t *testing.T, path string) string {
	t.Helper()
	cl := http.Client{Timeout: 5 * time.Second}
	req, err := http.NewRequest("GET", "http://"+p.httpAddr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.token != "" {
		req.Header.Set("Authorization", "Bearer "+p.token)
	}
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// wantMetrics asserts that /metrics has each of the given lines.
func (p *sidecarProcess) wantMetrics(t *testing.T, lines ...string) {
	t.Helper()
	body := p.httpGet(t, "/metrics")
	have := map[string]bool{}
	for _, l := range strings.Split(body, "\n") {
		have[l] = true
	}
	for _, l := range lines {
		if !have[l] {
			t.Fatalf("/metrics lacks %q:\n%s", l, body)
		}
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func waitFor(t *testing.T, limit time.Duration, what string, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting %v for %s", limit, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// numbered are items tx-00000.. spread over partitions p0..p(parts-1), the
// payload being the number, so storage can be checked item by item.
func numbered(t *testing.T, queue string, from, n, parts int) []protocol.PushItem {
	items := make([]protocol.PushItem, n)
	for i := range items {
		k := from + i
		items[i] = item(t, queue, "p"+strconv.Itoa(k%parts), fmt.Sprintf("tx-%05d", k), k)
	}
	return items
}

// checkStoredOnceInOrder asserts that items 0..total-1 are each stored
// exactly once, with gapless offsets and each partition in push order.
func checkStoredOnceInOrder(t *testing.T, pool *pgxpool.Pool, queue string, total, parts int, skip map[int]bool) {
	t.Helper()
	stored := 0
	for p := 0; p < parts; p++ {
		var want []string
		for k := p; k < total; k += parts {
			if !skip[k] {
				want = append(want, fmt.Sprintf("tx-%05d", k))
			}
		}
		msgs := storedMessages(t, pool, queue, "p"+strconv.Itoa(p))
		checkGapless(t, msgs, len(want))
		for i, m := range msgs {
			if m.TransactionID != want[i] {
				t.Fatalf("partition p%d offset %d holds %s, want %s: order not kept", p, i, m.TransactionID, want[i])
			}
		}
		stored += len(msgs)
	}
	t.Logf("%d messages stored once each, in order", stored)
}
