package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queenside/queenside/sidecar/pgserver"
	"github.com/queenside/queenside/sidecar/pgtest"
)

// The guards go on every connection that reaches PostgreSQL itself, and
// not on the pool's when a pooler may stand in between (it would refuse
// them); a setting the URL gives is kept.
func TestGuardsOnTheConnections(t *testing.T) {
	const direct, bouncer = "postgres://u@db:5432/q", "postgres://u@bouncer:6432/q?options=x&idle_in_transaction_session_timeout=60000"
	for _, c := range []struct {
		name       string
		opts       Options
		poolGuards bool
	}{
		{"direct", Options{URL: direct, Timeout: 3 * time.Second}, true},
		{"behind a pooler", Options{URL: bouncer, SessionURL: direct, Timeout: 3 * time.Second}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := c.opts.plan()
			if err != nil {
				t.Fatal(err)
			}
			pool, err := pgxpool.ParseConfig(c.opts.URL)
			if err != nil {
				t.Fatal(err)
			}
			p.apply(pool)
			session, err := p.connConfig(p.sessionURL, true)
			if err != nil {
				t.Fatal(err)
			}
			listen, err := p.connConfig(p.listenURL, false)
			if err != nil {
				t.Fatal(err)
			}
			if _, cancels := listen.BuildContextWatcherHandler(new(pgconn.PgConn)).(*pgconn.CancelRequestContextWatcherHandler); cancels {
				t.Fatal("the listener's waits for a notification, cut short by design, would send cancel requests")
			}
			for name, cfg := range map[string]*pgx.ConnConfig{"pool": pool.ConnConfig, "session": session} {
				if cfg.ConnectTimeout != 3*time.Second || cfg.DialFunc == nil {
					t.Fatalf("%s: connect timeout %v", name, cfg.ConnectTimeout)
				}
				if _, cancels := cfg.BuildContextWatcherHandler(new(pgconn.PgConn)).(*pgconn.CancelRequestContextWatcherHandler); !cancels {
					t.Fatalf("%s: a call cut short does not ask PostgreSQL to cancel it", name)
				}
				_, guarded := cfg.RuntimeParams["tcp_user_timeout"]
				if want := name == "session" || c.poolGuards; guarded != want {
					t.Fatalf("%s: server guards %v, want %v: %v", name, guarded, want, cfg.RuntimeParams)
				}
				if guarded && (cfg.RuntimeParams["idle_in_transaction_session_timeout"] != "1000" ||
					cfg.RuntimeParams["tcp_keepalives_idle"] != "3" || cfg.RuntimeParams["tcp_keepalives_interval"] != "1" ||
					cfg.RuntimeParams["tcp_keepalives_count"] != "5" || cfg.RuntimeParams["client_connection_check_interval"] != "1000") {
					t.Fatalf("%s: %v", name, cfg.RuntimeParams)
				}
			}
		})
	}
	if b := DeadPeerBound(5 * time.Second); b != 10*time.Second {
		t.Fatalf("DeadPeerBound(5s) = %v, want 10s", b)
	}
	if _, err := (Options{URL: direct, Timeout: -time.Second}).plan(); err == nil {
		t.Fatal("a negative timeout was taken")
	}
}

// startServerOfItsOwn starts a PostgreSQL for one test, which may then
// signal its processes.
func startServerOfItsOwn(t *testing.T) *pgserver.Server {
	t.Helper()
	dir := t.TempDir()
	for _, p := range []string{dir, filepath.Dir(dir)} {
		os.Chmod(p, 0o755) //nolint:errcheck // pgserver falls back to /var/tmp
	}
	pg, err := pgserver.Start(context.Background(), pgserver.Options{Dir: dir, Fast: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Stop("immediate") }) //nolint:errcheck // cleanup
	return pg
}

// On a frozen server: a call ends at the bound with a *TimeoutError, which
// counts as the database out of reach; a push still waiting for the group
// commit when its caller gives up was never sent (ErrNotSent); each is
// counted. The server applied the guards to the session.
func TestCallsOnAFrozenServerEndAtTheBound(t *testing.T) {
	if pgtest.Citus() {
		t.Skip("skipped on Citus: one server is frozen here")
	}
	ctx := context.Background()
	pg := startServerOfItsOwn(t)
	const timeout = 500 * time.Millisecond
	s, err := OpenWith(ctx, Options{URL: pg.URL("postgres"), Timeout: timeout}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	var idle string
	if err := s.pool.QueryRow(ctx, "SHOW idle_in_transaction_session_timeout").Scan(&idle); err != nil || idle != "1s" {
		t.Fatalf("idle_in_transaction_session_timeout is %q (%v), want 1s", idle, err)
	}
	if _, err := s.Push(ctx, messages("p", "warm", 1)); err != nil {
		t.Fatal(err)
	}

	if err := pg.Freeze(); err != nil {
		t.Fatal(err)
	}
	defer pg.Thaw() //nolint:errcheck // the test's end
	bctx, cancel := s.Bound(ctx)
	began := time.Now()
	_, err = s.Ping(bctx)
	err = TimedOut(bctx, err)
	cancel()
	if AsTimeout(err) == nil || !IsUnavailable(err) || time.Since(began) > timeout+time.Second {
		t.Fatalf("a ping of a frozen server: %v after %v; want a *TimeoutError at %v", err, time.Since(began), timeout)
	}
	// Every push worker busy on the frozen server; then a push whose
	// caller gives up before one is free.
	for range pushWorkers {
		go func() {
			bctx, cancel := s.Bound(ctx)
			defer cancel()
			s.Push(bctx, messages("p", "stuck", 1)) //nolint:errcheck // timing out is the point
		}()
		time.Sleep(30 * time.Millisecond) // past the group commit's hold: a batch each
	}
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err = s.Push(wctx, messages("p", "withdrawn", 1))
	cancel()
	if !errors.Is(err, ErrNotSent) {
		t.Fatalf("a push that never left the group commit: %v; want ErrNotSent", err)
	}
	time.Sleep(timeout)
	if n := s.Timeouts(); n < 2 {
		t.Fatalf("%d calls counted as timed out; want the ping and the stuck pushes", n)
	}
}

// On a server that answers, a call the timeout ends is cancelled there and
// keeps its session: the connection goes back to the pool warm instead of
// being closed. (Closing it made a database slowed by a stall pay a new
// session for every call that timed out, whose first calls were the
// slowest, until nothing got through.) The call still ends within the
// timeout.
func TestACallCutShortOnALiveServerKeepsItsSession(t *testing.T) {
	ctx := context.Background()
	dbURL := pgtest.NewDatabase(t)
	// The grace this timeout leaves (CancelGrace, 600 ms) is several times
	// what a cancel and rollback take on Citus, whose coordinator passes
	// them on to the shard's session: with 1 s (a 100 ms wait for the
	// cancel) a loaded machine could run out of it and close the session.
	const timeout = 3 * time.Second
	s, err := OpenWith(ctx, Options{URL: dbURL, Timeout: timeout}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if _, err := s.Push(ctx, messages("p", "warm", 1)); err != nil {
		t.Fatal(err)
	}
	holder, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	// The partition's row locked: a push to it waits until the timeout.
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var id int64
	if err := tx.QueryRow(ctx, "SELECT id FROM queenside.partitions WHERE name = 'p'").Scan(&id); err != nil {
		t.Fatal(err)
	}
	// The id inlined: Citus routes a statement that locks rows only when
	// it sees their shard.
	if _, err := tx.Exec(ctx, fmt.Sprintf("SELECT id FROM queenside.partitions WHERE id = %d FOR UPDATE", id)); err != nil {
		t.Fatal(err)
	}
	app := s.pool.Config().ConnConfig.RuntimeParams["application_name"]
	sessions := func() map[int32]bool {
		rows, _ := holder.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE application_name = $1", app)
		pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			t.Fatal(err)
		}
		out := map[int32]bool{}
		for _, p := range pids {
			out[p] = true
		}
		return out
	}
	before := sessions()
	bctx, cancel := s.Bound(ctx)
	began := time.Now()
	// A transaction (a push not through the group commit, which goes on
	// without its caller): it runs on the caller's context.
	_, _, err = s.Transaction(bctx, nil, messages("p", "cut", 1))
	err = TimedOut(bctx, err)
	cancel()
	took := time.Since(began)
	if AsTimeout(err) == nil || took > timeout+200*time.Millisecond {
		t.Fatalf("a transaction held on a lock: %v after %v; want a *TimeoutError within %v", err, took, timeout)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Push(ctx, messages("p", "after", 1)); err != nil {
		t.Fatal(err)
	}
	after := sessions()
	for pid := range before {
		if !after[pid] {
			t.Errorf("session %d was closed by the call the timeout ended; sessions before %v, after %v", pid, before, after)
		}
	}
	var cut int
	if err := holder.QueryRow(ctx, "SELECT count(*) FROM queenside.segments s JOIN queenside.partitions p ON p.id = s.partition_id WHERE p.name = 'p'").Scan(&cut); err != nil {
		t.Fatal(err)
	}
	if cut != 2 {
		t.Errorf("%d segments in partition p; want 2 (warm and after: the cut transaction was rolled back)", cut)
	}
}

// A call cut short on a session that neither answers nor confirms the
// cancel, on a server that is otherwise alive (what a Citus coordinator's
// session waiting on a frozen worker is), gives its place in the pool up at
// once: on a pool of one, the next call opens a new connection and is
// answered within the timeout. (pgx reads a given-up connection until
// the server closes it, up to 15 s, and the pool counted it all that time:
// with a worker frozen, calls to the others found no connection free.)
func TestACallCutShortOnASilentSessionFreesItsPlaceInThePool(t *testing.T) {
	if pgtest.Citus() {
		t.Skip("skipped on Citus: a server of its own here (TestAStalledWorkerBuffersOnlyItsPartitions is the case on Citus)")
	}
	ctx := context.Background()
	pg := startServerOfItsOwn(t)
	const timeout = time.Second
	s, err := OpenWith(ctx, Options{URL: pg.URL("postgres"), Timeout: timeout, Connections: 2, ListenURL: ListenNone}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if n := s.PoolSize(); n != 1 {
		t.Fatalf("a pool of %d; want 1", n)
	}
	var pid int
	if err := s.pool.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("stop the session's process %d: %v", pid, err)
	}
	defer syscall.Kill(pid, syscall.SIGCONT) //nolint:errcheck // it finds its client gone and ends

	bctx, cancel := s.Bound(ctx)
	_, err = s.Ping(bctx)
	err = TimedOut(bctx, err)
	cancel()
	if AsTimeout(err) == nil {
		t.Fatalf("a ping on a stopped session: %v; want a *TimeoutError", err)
	}
	bctx, cancel = s.Bound(ctx)
	began := time.Now()
	_, err = s.Ping(bctx)
	cancel()
	if err != nil {
		t.Fatalf("the next ping, on a pool of one: %v after %v; want it answered on a new connection", err, time.Since(began))
	}
	var other int
	if err := s.pool.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&other); err != nil || other == pid {
		t.Fatalf("the pool's session after: %d (%v); want a new one, not %d", other, err, pid)
	}
}

// A transaction whose COMMIT waits for its results to be read raises the
// server's idle-in-transaction guard, for itself, to the database timeout:
// reading a pop's payloads may take longer than the guard's T/5. One
// committed in its batch keeps the guard.
func TestATransactionCommittedAfterItsResultsMayIdleForTheTimeout(t *testing.T) {
	ctx := context.Background()
	s, err := OpenWith(ctx, Options{URL: pgtest.NewDatabase(t), Timeout: 3 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	for _, c := range []struct {
		pipelined bool
		want      string
	}{{false, "3s"}, {true, "1s"}} {
		conn, err := s.pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var b pgx.Batch
		s.queueBegin(&b, c.pipelined)
		b.Queue("SHOW idle_in_transaction_session_timeout")
		br := conn.SendBatch(ctx, &b)
		err = begun(br, c.pipelined)
		var got string
		if err == nil {
			err = br.QueryRow().Scan(&got)
		}
		br.Close()
		s.release(ctx, conn)
		if err != nil || got != c.want {
			t.Errorf("pipelined %v: idle_in_transaction_session_timeout %q (%v), want %q", c.pipelined, got, err, c.want)
		}
	}
}
