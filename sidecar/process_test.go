package sidecar

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// queensideBinary builds the real command once per test run, for tests
// that need separate processes.
func queensideBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "qsbin")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "queenside")
		out, err := exec.Command("go", "build", "-o", binPath, "./cmd/queenside").CombinedOutput()
		if err != nil {
			buildErr = err
			binPath = string(out)
		}
	})
	if buildErr != nil {
		t.Fatalf("build queenside: %v\n%s", buildErr, binPath)
	}
	return binPath
}

// serveProcess is `queenside serve` running as a child process.
type serveProcess struct {
	cmd    *exec.Cmd
	socket string
	log    *lockedLog
}

// lockedLog collects a child process's output, which os/exec copies in
// from its own goroutine while the test may read it.
type lockedLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startServe runs `queenside serve` on dbURL and waits until it is healthy.
func startServe(t testing.TB, dbURL string, extra ...string) *serveProcess {
	t.Helper()
	socket := filepath.Join(shortTempDir(t), "qs.sock")
	args := append([]string{"serve", "--socket", socket, "--database-url", dbURL,
		"--spool-dir", filepath.Join(shortTempDir(t), "spool"), "--log-level", "warn"}, extra...)
	cmd := exec.Command(queensideBinary(t), args...)
	log := &lockedLog{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &serveProcess{cmd: cmd, socket: socket, log: log}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck
		cmd.Wait()                          //nolint:errcheck
		if t.Failed() {
			t.Logf("serve %s log:\n%s", socket, log.String())
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := queenside.Dial(ctx, socket)
		if err == nil {
			h, herr := c.Health(ctx)
			c.Close()
			if herr == nil && h.Status == protocol.HealthOK {
				cancel()
				return p
			}
		}
		cancel()
		if time.Now().After(deadline) {
			t.Fatalf("serve did not become healthy: %v\n%s", err, log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestOffsetsGaplessAcrossTwoServeProcesses(t *testing.T) {
	ts := startSidecar(t, "", Options{}) // only for its database and pool
	a := startServe(t, ts.dbURL)
	b := startServe(t, ts.dbURL)
	var clients []*queenside.Client
	for i := 0; i < 4; i++ {
		clients = append(clients, dialClient(t, a.socket), dialClient(t, b.socket))
	}
	const requests, perRequest = 30, 10
	results := pushConcurrently(t, clients, "shared", "lane", requests, perRequest)
	stored := checkGapless(t, storedMessages(t, ts.pool, "shared", "lane"), len(clients)*requests*perRequest)
	checkResultsMatchStorage(t, results, stored)
}

func TestServeRefusesALiveSocket(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	out, err := exec.Command(queensideBinary(t), "serve", "--socket", ts.socket, "--database-url", ts.dbURL,
		"--spool-dir", filepath.Join(shortTempDir(t), "spool")).CombinedOutput()
	if err == nil {
		t.Fatal("a second serve started on a live socket")
	}
	if !bytes.Contains(out, []byte("in use")) {
		t.Fatalf("unclear message: %s", out)
	}
	stillServes(t, ts)
}
