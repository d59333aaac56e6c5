package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// These tests run the real binary as a person or a script would.

func buildCLI(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "queenside")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

func shortDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "qsdev")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755) //nolint:errcheck // the postgres user must reach it when run as root
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// devProcess is a running `queenside dev` and what it printed.
type devProcess struct {
	*exec.Cmd
	log *syncBuffer
}

// syncBuffer is a buffer a process writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startDev runs `queenside dev` in dir and waits until its socket answers health.
func startDev(t *testing.T, bin, dir string) *devProcess {
	t.Helper()
	cmd := exec.Command(bin, "dev", "--log-level", "warn")
	cmd.Dir = dir
	log := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Interrupt, as Ctrl-C would, so that dev stops its PostgreSQL too.
		if cmd.ProcessState == nil {
			cmd.Process.Signal(os.Interrupt)                                       //nolint:errcheck
			timer := time.AfterFunc(30*time.Second, func() { cmd.Process.Kill() }) //nolint:errcheck
			cmd.Wait()                                                             //nolint:errcheck
			timer.Stop()
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, err := runCLI(t, bin, dir, "", "health")
		if err == nil {
			return &devProcess{Cmd: cmd, log: log}
		}
		if time.Now().After(deadline) {
			t.Fatalf("dev never became healthy: %v %s\n%s", err, out, log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// devDatabaseURL is the database URL dev printed.
func devDatabaseURL(t *testing.T, dev *devProcess) string {
	t.Helper()
	for _, l := range strings.Split(dev.log.String(), "\n") {
		if u, ok := strings.CutPrefix(strings.TrimSpace(l), "database: "); ok {
			return u
		}
	}
	t.Fatalf("dev printed no database URL:\n%s", dev.log.String())
	return ""
}

func runCLI(t *testing.T, bin, dir, stdin string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "QUEENSIDE_SOCKET=")
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestDevPushStatsHealthAndRestart(t *testing.T) {
	bin := buildCLI(t)
	dir := shortDir(t)
	dev := startDev(t, bin, dir)

	// A second dev on the same directory refuses at once, saying who holds
	// it, and leaves the first one's PostgreSQL alone.
	began := time.Now()
	out, err := runCLI(t, bin, dir, "", "dev", "--log-level", "warn", "--http-addr", "127.0.0.1:0")
	want := fmt.Sprintf("is in use by queenside dev, process %d (socket %s", dev.Process.Pid, filepath.Join(dir, ".queenside", "queenside.sock"))
	if err == nil || !strings.Contains(out, want) || strings.Count(strings.TrimSpace(out), "\n") > 0 || time.Since(began) > 10*time.Second {
		t.Fatalf("a second dev on a directory in use: %v after %v\n%s\nwant one line with %q", err, time.Since(began), out, want)
	}

	out, err = runCLI(t, bin, dir, "", "push", "--queue", "hello", "--payload", `{"hi": 1}`, "--transaction-id", "first")
	if err != nil || !strings.Contains(out, "queued") {
		t.Fatalf("push: %v\n%s", err, out)
	}
	out, err = runCLI(t, bin, dir, "a\nb\nc\n", "push", "-q", "hello", "--encoding", "string", "--json")
	if err != nil {
		t.Fatalf("push from stdin: %v\n%s", err, out)
	}
	var reply struct {
		Results []struct {
			Status string `json:"status"`
			Offset int64  `json:"offset"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &reply); err != nil || len(reply.Results) != 3 || reply.Results[2].Offset != 3 {
		t.Fatalf("push --json: %v\n%s", err, out)
	}
	if out, err := runCLI(t, bin, dir, "", "push", "-q", "hello", "--payload", "not json"); err == nil {
		t.Fatalf("a payload that is not JSON was accepted:\n%s", out)
	}
	if out, err := runCLI(t, bin, dir, "", "push", "-q", "bad queue", "--payload", "1"); err == nil {
		t.Fatalf("a failed item exited 0:\n%s", out)
	}

	// Lines that add up to more than a frame go in as many requests as they
	// need; a line that cannot fit in one is refused, naming the limit and
	// the flag, and nothing is pushed.
	big := strings.Repeat(strings.Repeat("x", 6<<20)+"\n", 3)
	out, err = runCLI(t, bin, dir, big, "push", "-q", "big", "--encoding", "string", "--json")
	if err != nil || strings.Count(out, `"queued"`) != 3 {
		t.Fatalf("three 6 MB lines: %v\n%.500s", err, out)
	}
	out, err = runCLI(t, bin, dir, strings.Repeat("y", 17<<20)+"\n", "push", "-q", "big", "--encoding", "string")
	if err == nil || !strings.Contains(out, "line 1: a message of") || !strings.Contains(out, "frame limit of 16777216 bytes") ||
		!strings.Contains(out, "--max-frame-bytes") {
		t.Fatalf("a 17 MB line: %v\n%.500s", err, out)
	}

	// A first pop and ack, as the README shows them.
	out, err = runCLI(t, bin, dir, "", "pop", "--queue", "hello", "--batch", "2", "--ack")
	if err != nil || !strings.Contains(out, `{"hi":1}`) || !strings.Contains(out, "cursor 2, released true") ||
		!strings.Contains(out, "(offset 0 delivered for the first time)") {
		t.Fatalf("pop --ack: %v\n%s", err, out)
	}
	out, err = runCLI(t, bin, dir, "", "pop", "--queue", "hello", "--batch", "1", "--json")
	var popped struct {
		Messages []struct {
			Offset  int64  `json:"offset"`
			Payload string `json:"payload"`
		} `json:"messages"`
		Leases []struct {
			LeaseID string `json:"leaseId"`
		} `json:"leases"`
	}
	if err != nil || json.Unmarshal([]byte(out), &popped) != nil || len(popped.Messages) != 1 || popped.Messages[0].Offset != 2 || popped.Messages[0].Payload != "b" {
		t.Fatalf("pop --json: %v\n%s", err, out)
	}
	out, err = runCLI(t, bin, dir, "", "ack", "--lease", popped.Leases[0].LeaseID, "--offset", "2")
	if err != nil || !strings.Contains(out, "cursor 3") {
		t.Fatalf("ack: %v\n%s", err, out)
	}
	if out, err := runCLI(t, bin, dir, "", "ack", "--lease", popped.Leases[0].LeaseID, "--offset", "2"); err == nil {
		t.Fatalf("an ack on a released lease exited 0:\n%s", out)
	}

	out, err = runCLI(t, bin, dir, "", "stats", "--queue", "hello", "--json")
	var stats struct {
		Partitions []struct {
			HeadOffset int64 `json:"headOffset"`
		} `json:"partitions"`
	}
	if err != nil || json.Unmarshal([]byte(out), &stats) != nil || len(stats.Partitions) != 1 || stats.Partitions[0].HeadOffset != 4 {
		t.Fatalf("stats: %v\n%s", err, out)
	}
	if out, err := runCLI(t, bin, dir, "", "stats", "--queue", "nope"); err == nil {
		t.Fatalf("stats of a missing queue exited 0:\n%s", out)
	}

	// The banner's command runs as printed.
	try := regexp.MustCompile(`try: +(.+)`).FindStringSubmatch(dev.log.String())
	if try == nil {
		t.Fatalf("no try: line in the banner:\n%s", dev.log.String())
	}
	sh := exec.Command("sh", "-c", try[1])
	sh.Dir = dir
	if out, err := sh.CombinedOutput(); err != nil || !strings.Contains(string(out), "queued") {
		t.Fatalf("the banner's %q: %v\n%s", try[1], err, out)
	}

	operateQueues(t, bin, dir)

	// Ctrl-C stops the sidecar and PostgreSQL cleanly...
	dev.Process.Signal(os.Interrupt) //nolint:errcheck
	done := make(chan error, 1)
	go func() { done <- dev.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("dev exited with %v after Ctrl-C", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("dev did not stop after Ctrl-C")
	}
	if out, err := runCLI(t, bin, dir, "", "health"); err == nil {
		t.Fatalf("health still answers after dev stopped:\n%s", out)
	}
	// ...and a second run reuses the data directory.
	startDev(t, bin, dir)
	out, err = runCLI(t, bin, dir, "", "push", "--queue", "hello", "--payload", `{"hi": 1}`, "--transaction-id", "first")
	if err != nil || !strings.Contains(out, "duplicate") {
		t.Fatalf("after restart the first message should still be there:\n%s", out)
	}
}

// operateQueues runs the operating commands as a person would: configure,
// queues, a dead letter listed and replayed, groups, seek.
func operateQueues(t *testing.T, bin, dir string) {
	t.Helper()
	run := func(args ...string) string {
		t.Helper()
		out, err := runCLI(t, bin, dir, "", args...)
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		return out
	}
	run("configure", "-q", "ops", "--retry-limit", "0", "--delay-seconds", "0")
	if out := run("configure", "-q", "ops", "--lease-seconds", "30"); !strings.Contains(out, "lease 30 s, 0 retries") {
		t.Fatalf("configure did not keep the options not given:\n%s", out)
	}
	if out := run("configure", "-q", "ops", "--max-deliveries", "5"); !strings.Contains(out, "lease 30 s, 0 retries") ||
		!strings.Contains(out, "at most 5 deliveries") {
		t.Fatalf("configure --max-deliveries:\n%s", out)
	}
	if out := run("queues"); !strings.Contains(out, "MAX DELIVERIES") || !regexp.MustCompile(`ops +0 +30 +0 +5 `).MatchString(out) {
		t.Fatalf("queues:\n%s", out)
	}
	run("configure", "-q", "ops", "--max-deliveries", "0")
	run("push", "-q", "ops", "--payload", `{"job": 7}`, "--transaction-id", "job-7")
	var popped struct {
		Leases []struct {
			LeaseID string `json:"leaseId"`
		} `json:"leases"`
	}
	if err := json.Unmarshal([]byte(run("pop", "-q", "ops", "--group", "workers", "--json")), &popped); err != nil || len(popped.Leases) != 1 {
		t.Fatalf("pop: %v", err)
	}
	run("ack", "--lease", popped.Leases[0].LeaseID, "--offset", "0", "--failed", "--error", "no such customer")
	out := run("dlq", "list", "-q", "ops")
	if !strings.Contains(out, "job-7") || !strings.Contains(out, "no such customer") || !strings.Contains(out, `{"job":7}`) {
		t.Fatalf("dlq list:\n%s", out)
	}
	var page struct {
		Entries []struct {
			ID int64 `json:"id"`
		} `json:"entries"`
	}
	if err := json.Unmarshal([]byte(run("dlq", "list", "-q", "ops", "--json")), &page); err != nil || len(page.Entries) != 1 {
		t.Fatalf("dlq list --json: %v", err)
	}
	if out := run("dlq", "replay", strconv.FormatInt(page.Entries[0].ID, 10)); !strings.Contains(out, "queued as offset 1") {
		t.Fatalf("dlq replay:\n%s", out)
	}
	if out, err := runCLI(t, bin, dir, "", "dlq", "replay", "999999"); err == nil || !strings.Contains(out, "not_found") {
		t.Fatalf("replay of a missing entry: %v\n%s", err, out)
	}
	if out := run("groups", "-q", "ops"); !strings.Contains(out, "workers") || !strings.Contains(out, "1") {
		t.Fatalf("groups:\n%s", out)
	}
	if out := run("seek", "-q", "ops", "-g", "workers", "--to", "beginning", "--json"); !strings.Contains(out, `"cursor": 0`) {
		t.Fatalf("seek:\n%s", out)
	}
	if out := run("groups", "-q", "ops", "--delete", "workers"); !strings.Contains(out, "deleted") {
		t.Fatalf("groups --delete:\n%s", out)
	}
}

// A usage error is one line, with the error and where help is, exit 2: not
// the whole usage text, not the error twice.
func TestUsageErrorsAreOneLine(t *testing.T) {
	bin := buildCLI(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"pop", "--queue", "x", "--batch", "abc"}, `queenside pop: invalid value "abc" for flag -batch: parse error (see queenside pop --help)`},
		{[]string{"dlq", "replay", "--nosuch"}, "queenside dlq replay: flag provided but not defined: -nosuch (see queenside dlq replay --help)"},
		{[]string{"nosuchcmd"}, `queenside: no command "nosuchcmd" (see queenside --help)`},
	} {
		cmd := exec.Command(bin, c.args...)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 || strings.TrimSpace(string(out)) != c.want {
			t.Errorf("%v: %v\n%s\nwant exit 2 and the one line %q", c.args, err, out, c.want)
		}
	}
}

// TestVerifyRefusesWhatDoesNotFit: fault counts given that cannot fit in the
// traffic are refused at once, in one line naming what fits, before any
// PostgreSQL or sidecar is started.
func TestVerifyRefusesWhatDoesNotFit(t *testing.T) {
	bin := buildCLI(t)
	dir := t.TempDir()
	began := time.Now()
	out, err := runCLI(t, bin, dir, "", "verify", "--duration", "150s", "--rate", "3000", "--partitions", "500", "--pg-failovers", "6")
	want := "verify: 6 pg-failover faults do not fit in 150s of traffic: at most 3 fit (each needs about 40 s); lower --pg-failovers or raise --duration\n"
	if err == nil || out != want {
		t.Fatalf("%v\n%q\nwant %q", err, out, want)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("the refusal took %v: something was started", took)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("the refused run left %d files in its directory", len(entries))
	}
}

// TestVerifyCitusFlags: on Citus the failovers default to none, a count of
// them given is refused, and worker restarts are refused without Citus;
// all before anything is started.
func TestVerifyCitusFlags(t *testing.T) {
	bin := buildCLI(t)
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--citus", "--pg-failovers", "1"},
			"verify: --pg-failovers 1 with --citus: a Citus coordinator has no standby here to fail over to; set --pg-failovers 0\n"},
		{[]string{"--worker-restarts", "1"},
			"verify: --worker-restarts 1: worker-restart faults need --citus, without which there are no Citus workers to restart; add --citus or set --worker-restarts 0\n"},
		// Refused for its rate alone: the default failovers are none.
		{[]string{"--citus", "--rate", "0"}, "verify: --rate 0: want at least 1 event/s\n--rate × --duration must make at least one event\n"},
	} {
		out, err := runCLI(t, bin, dir, "", append([]string{"verify"}, tc.args...)...)
		if err == nil || out != tc.want {
			t.Errorf("verify %v: %v\n%q\nwant %q", tc.args, err, out, tc.want)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("the refused runs left %d files in their directory", len(entries))
	}
}

// grant, grants and revoke, run as the schema's owner: a right granted is
// listed and takes effect for the role, a bad right is refused in one
// line, and a revoke of what the role does not have says so and fails.
func TestGrantGrantsAndRevoke(t *testing.T) {
	bin := buildCLI(t)
	dir := shortDir(t)
	dbURL := devDatabaseURL(t, startDev(t, bin, dir))
	role := fmt.Sprintf("qs_cli_%x", time.Now().UnixNano())
	if out, err := exec.Command("psql", dbURL, "-c", "CREATE ROLE "+role+" LOGIN").CombinedOutput(); err != nil {
		t.Skipf("psql cannot create a role here (%v): %s", err, out)
	}
	t.Cleanup(func() { exec.Command("psql", dbURL, "-c", "DROP ROLE IF EXISTS "+role).Run() }) //nolint:errcheck

	out, err := runCLI(t, bin, dir, "", "grant", "--database-url", dbURL, "--role", role, "--queue", "billing.*", "--rights", "produce, consume", "--groups", "workers*")
	if err != nil || !strings.Contains(out, "granted produce, consume on billing.* to "+role) {
		t.Fatalf("grant: %v\n%s", err, out)
	}
	out, err = runCLI(t, bin, dir, "", "grants", "--database-url", dbURL, "--role", role)
	if err != nil || !strings.Contains(out, role+"  billing.*  consume,produce  workers*") {
		t.Fatalf("grants: %v\n%s", err, out)
	}
	// The grant is the login role's (session_user), so psql logs in as it.
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	may, err := exec.Command("psql", u.String(), "-Atc", "SELECT queenside.may('billing.eu', 'produce')").CombinedOutput()
	if err != nil || strings.TrimSpace(string(may)) != "t" {
		t.Fatalf("the grant does not hold for the role: %v %s", err, may)
	}
	out, err = runCLI(t, bin, dir, "", "grant", "--database-url", dbURL, "--role", role, "--queue", "orders", "--rights", "write")
	if err == nil || strings.Count(strings.TrimSpace(out), "\n") != 0 || !strings.Contains(out, "want one or more of produce, consume, read, manage") {
		t.Fatalf("grant of a right that does not exist: %v\n%s", err, out)
	}
	if out, err := runCLI(t, bin, dir, "", "revoke", "--database-url", dbURL, "--role", role, "--queue", "billing.*", "--rights", "produce"); err != nil || !strings.Contains(out, "revoked") {
		t.Fatalf("revoke: %v\n%s", err, out)
	}
	out, err = runCLI(t, bin, dir, "", "revoke", "--database-url", dbURL, "--role", role, "--queue", "billing.*", "--rights", "produce")
	if err == nil || !strings.Contains(out, "had no such right on billing.*") {
		t.Fatalf("a second revoke: %v\n%s", err, out)
	}
	out, _ = runCLI(t, bin, dir, "", "grants", "--database-url", dbURL)
	if !strings.Contains(out, role+"  billing.*  consume  ") {
		t.Fatalf("grants after the revoke of produce:\n%s", out)
	}
}
