package sidecar

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/pgtest"
	"github.com/queenside/queenside/sidecar/store"
)

// startPgBouncer runs a real PgBouncer in transaction pooling mode in
// front of the database at dbURL, with a server pool of poolSize, and
// returns a URL to the database through it. PgBouncer refuses to run as
// root, so as root it runs as the postgres user.
func startPgBouncer(t *testing.T, dbURL string, poolSize int) string {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		bin = "/usr/sbin/pgbouncer"
	}
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("pgbouncer is required in CI: %v", err)
		}
		t.Skip("pgbouncer is not installed (apt install pgbouncer); .ci/run installs it")
	}
	db, err := pgx.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	dir := shortTempDir(t)
	port := freePort(t)
	ini := fmt.Sprintf(`[databases]
%[1]s = host=%[2]s port=%[3]d dbname=%[1]s user=%[4]s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %[5]d
unix_socket_dir =
auth_type = trust
auth_file = %[6]s/users.txt
pool_mode = transaction
default_pool_size = %[7]d
max_client_conn = 1000
logfile = %[6]s/pgbouncer.log
pidfile = %[6]s/pgbouncer.pid
`, db.Database, db.Host, db.Port, db.User, port, dir, poolSize)
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("pgbouncer.ini", ini)
	write("users.txt", fmt.Sprintf("%q \"\"\n", db.User))
	cmd := exec.Command(bin, filepath.Join(dir, "pgbouncer.ini"))
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("pgbouncer refuses root, and there is no postgres user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		for _, p := range []string{dir, filepath.Join(dir, "pgbouncer.ini"), filepath.Join(dir, "users.txt")} {
			if err := os.Chown(p, uid, gid); err != nil {
				t.Fatal(err)
			}
		}
		cmd = exec.Command("runuser", "-u", "postgres", "--", bin, filepath.Join(dir, "pgbouncer.ini"))
	}
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group: runuser does not pass a SIGKILL on.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }() //nolint:errcheck // its output says why
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) //nolint:errcheck // gone already is fine
		<-exited
		if t.Failed() {
			log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
			t.Logf("pgbouncer output:\n%s\nlog:\n%s", out, log)
		}
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for deadline := time.Now().Add(10 * time.Second); ; {
		select {
		case <-exited:
			t.Fatalf("pgbouncer exited: %s", out)
		default:
		}
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pgbouncer does not listen on %s: %s", addr, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable", db.User, addr, db.Database)
}

func freePort(t *testing.T) int {
	t.Helper()
	_, port, _ := net.SplitHostPort(freeAddr(t))
	n, _ := strconv.Atoi(port)
	return n
}

// Behind PgBouncer in transaction pooling mode, with the session URL
// straight to PostgreSQL: everything works, through two sidecars sharing
// a server pool smaller than their pools.
func TestBehindPgBouncerInTransactionMode(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	bouncer := startPgBouncer(t, dbURL, 2)
	db := store.Options{URL: bouncer, SessionURL: dbURL}
	a := startSidecarWith(t, db, dbURL, Options{})
	b := startSidecarWith(t, db, dbURL, Options{})
	if mode := a.srv.store.QueryExecMode(); mode != "cache_describe" {
		t.Fatalf("query exec mode behind a pooler: %s, want cache_describe", mode)
	}
	ca, cb := a.client(t), b.client(t)
	ctx := testContext(t)

	// A long-poll on a is woken by a push through b: b's NOTIFY reaches
	// a's listener, which is connected straight to PostgreSQL.
	popped := make(chan queenside.PopResult, 1)
	go func() {
		res, err := ca.Pop(ctx, queenside.PopArgs{Queue: "bq", Group: "g", Batch: 100, WaitMs: 30000})
		if err != nil {
			t.Error(err)
		}
		popped <- res
	}()
	time.Sleep(300 * time.Millisecond) // the pop is waiting
	for i := range 50 {
		mustPush(t, cb, item(t, "bq", fmt.Sprintf("p%d", i%5), fmt.Sprintf("t%d", i), i))
	}
	var first queenside.PopResult
	select {
	case first = <-popped:
	case <-time.After(20 * time.Second):
		t.Fatal("the long-poll was not woken by the push")
	}
	if len(first.Messages) == 0 {
		t.Fatal("the woken pop delivered nothing")
	}
	mustAck(t, ca, completedAll(first)...)
	got := len(first.Messages) + len(drain(t, ca, "bq", "g"))
	if got != 50 {
		t.Fatalf("delivered %d of 50", got)
	}
	checkGapless(t, storedMessages(t, a.pool, "bq", "p0"), 10)

	// A duplicate is still found, whichever server connection runs it.
	if r := mustPush(t, ca, item(t, "bq", "p0", "t0", 0)); r[0].Status != protocol.StatusDuplicate {
		t.Fatalf("a repeated transaction id through the pooler: %+v", r)
	}

	// transaction: an ack and a push, all or nothing.
	mustPush(t, ca, item(t, "in", "p", "x1", "x"))
	in := mustPop(t, ca, protocol.PopArgs{Queue: "in", Partition: "p", Group: "g"})
	tr, err := ca.Transaction(ctx, []queenside.AckItem{queenside.Completed(in.Messages[0])},
		[]queenside.PushItem{item(t, "out", "p", "y1", "y")})
	if err != nil || !tr.Acks[0].Success || tr.Pushes[0].Status != protocol.StatusQueued {
		t.Fatalf("transaction: %+v %v", tr, err)
	}
	if out := drain(t, cb, "out", "g"); len(out) != 1 || out[0].TransactionID != "y1" {
		t.Fatalf("the transaction's push: %+v", out)
	}

	// Dead letters, and a replay of one.
	configure(t, ca, "d", func(o *protocol.QueueOptions) { o.RetryLimit = 0 })
	deadLetter(t, ca, "d", "p", "dead", "boom")
	page, err := cb.DLQ(ctx, queenside.DLQArgs{Queue: "d"})
	if err != nil || len(page.Entries) != 1 || page.Entries[0].TransactionID != "dead" {
		t.Fatalf("dlq: %+v %v", page, err)
	}
	if r, err := cb.DLQReplay(ctx, page.Entries[0].ID); err != nil || r[0].Status != protocol.StatusQueued {
		t.Fatalf("dlq replay: %+v %v", r, err)
	}

	// Seek back to the beginning: the group gets every message again.
	if _, err := cb.Seek(ctx, "bq", "g", "", queenside.SeekBeginning); err != nil {
		t.Fatalf("seek: %v", err)
	}
	if again := drain(t, cb, "bq", "g"); len(again) != 50 {
		t.Fatalf("after the seek: %d messages, want 50", len(again))
	}

	// The pooler kept its server side to its pool of 2, whatever the
	// sidecars' pools of 4 asked; only the session connections and the
	// listeners went to PostgreSQL directly.
	var servers int
	if err := a.pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name LIKE 'queenside%' AND query LIKE 'LISTEN%'").Scan(&servers); err != nil {
		t.Fatal(err)
	}
	if servers != 2 {
		t.Fatalf("%d listeners on PostgreSQL, want one per sidecar", servers)
	}
}

func completedAll(res queenside.PopResult) []queenside.AckItem {
	items := make([]queenside.AckItem, len(res.Messages))
	for i, m := range res.Messages {
		items[i] = queenside.Completed(m)
	}
	return items
}

// A sidecar whose listener is off still wakes its own long-polls at once
// on its own pushes, and another sidecar's within its second of looking.
func TestWithoutAListenerPopsAreWokenByLooking(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	db := store.Options{URL: dbURL, ListenURL: store.ListenNone, Connections: 3}
	a := startSidecarWith(t, db, dbURL, Options{})
	b := startSidecarWith(t, db, dbURL, Options{})
	ca, cb := a.client(t), b.client(t)
	ctx := testContext(t)
	wait := func(c *queenside.Client) chan queenside.PopResult {
		ch := make(chan queenside.PopResult, 1)
		go func() {
			res, err := c.Pop(ctx, queenside.PopArgs{Queue: "w", Group: "g", WaitMs: 20000})
			if err != nil {
				t.Error(err)
			}
			ch <- res
		}()
		time.Sleep(200 * time.Millisecond)
		return ch
	}
	for _, pusher := range []*queenside.Client{ca, cb} { // its own push, then the other's
		popped := wait(ca)
		mustPush(t, pusher, item(t, "w", "p", "", "x"))
		select {
		case res := <-popped:
			if len(res.Messages) != 1 {
				t.Fatalf("woken pop: %+v", res)
			}
			mustAck(t, ca, completedAll(res)...)
		case <-time.After(10 * time.Second):
			t.Fatal("the waiting pop was not woken")
		}
	}
	if a.srv.store.Listening() {
		t.Fatal("a listener runs though it was turned off")
	}
	var listeners int
	if err := a.pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN%'").Scan(&listeners); err != nil || listeners != 0 {
		t.Fatalf("%d listeners (%v), want none", listeners, err)
	}
}

// Given a transaction pooler as their only URL, sidecars started together
// each refuse to start, at once, with the same one line naming the flag to
// set: never a driver error, whichever server connection the pooler hands
// out. `queenside migrate` refuses the pooler too. With the session URL
// set apart, the same sidecars serve.
func TestThePoolerAsTheOnlyURLIsRefusedWithTheFlagToSet(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	bouncer := startPgBouncer(t, dbURL, 2)
	const sidecars = 3
	outputs := make(chan string, sidecars)
	for range sidecars {
		go func() {
			dir := shortTempDir(t)
			cmd := exec.Command(queensideBinary(t), "serve", "--socket", filepath.Join(dir, "qs.sock"),
				"--database-url", bouncer, "--spool-dir", filepath.Join(dir, "spool"), "--log-level", "warn")
			done := make(chan struct{})
			var out []byte
			var err error
			go func() { out, err = cmd.CombinedOutput(); close(done) }()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				cmd.Process.Kill() //nolint:errcheck // it failed to stop
				<-done
				outputs <- "still running after 30 s:\n" + string(out)
				return
			}
			if err == nil {
				outputs <- "exited with status 0:\n" + string(out)
				return
			}
			outputs <- string(out)
		}()
	}
	const want = "queenside: --database-url leads to a connection pooler, not to PostgreSQL itself"
	for range sidecars {
		out := <-outputs
		last := lastLine(out)
		if !strings.HasPrefix(last, want) || !strings.Contains(last, "set --session-database-url to PostgreSQL itself") {
			t.Errorf("a sidecar on the pooler's URL alone ended with %q, want the line naming --session-database-url; output:\n%s", last, out)
		}
		for _, bad := range []string{"SQLSTATE", "stmtcache", "panic"} {
			if strings.Contains(out, bad) {
				t.Errorf("the output holds %q:\n%s", bad, out)
			}
		}
	}

	out, err := exec.Command(queensideBinary(t), "migrate", "--database-url", bouncer).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "the connection leads to a connection pooler") {
		t.Errorf("migrate through the pooler: %v\n%s", err, out)
	}

	// The same pooler for pushes, pops and acks, PostgreSQL for the session.
	for range 2 {
		p := startServe(t, bouncer, "--session-database-url", dbURL)
		c := dialClient(t, p.socket)
		mustPush(t, c, item(t, "pooled", "p", "", "x"))
	}
}

// lastLine is the last line of out that is not empty.
func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1]
}
