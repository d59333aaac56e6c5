package sidecar

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/netns"
	"github.com/queenside/queenside/sidecar/pgserver"
	"github.com/queenside/queenside/sidecar/pgtest"
	"github.com/queenside/queenside/sidecar/store"
)

// A network partition between a sidecar and PostgreSQL: the server runs
// in a network namespace of the test's own, and the sidecar under test
// reaches it over a link (a veth pair) that the test cuts, so that packets
// are dropped without a word both ways. Everything else (the test's own
// connections, a second sidecar) goes over the server's Unix socket, which
// the cut does not touch.

// partitionTimeout is the partitioned sidecar's --database-timeout here.
const partitionTimeout = 2 * time.Second

// linkedPostgres is a PostgreSQL of the test's own in a namespace, and the
// link to it.
type linkedPostgres struct {
	*privatePostgres
	link   *netns.Link
	tcpURL string // over the link
}

func startLinkedPostgres(t *testing.T) *linkedPostgres {
	t.Helper()
	if err := netns.Available(); err != nil {
		t.Skipf("skipped: a partition needs a network namespace: %v", err)
	}
	if pgtest.Citus() {
		t.Skip("skipped: on Citus, partitions are checked by queenside verify")
	}
	n, err := netns.New()
	if err != nil {
		t.Fatal(err)
	}
	link, err := n.Link()
	if err != nil {
		n.Close()
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, p := range []string{dir, filepath.Dir(dir)} {
		os.Chmod(p, 0o755) //nolint:errcheck // pgserver falls back to /var/tmp
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pg, err := pgserver.Start(ctx, pgserver.Options{Dir: dir, NetNS: n.Name(), ListenAddress: link.ServerAddr})
	if err != nil {
		n.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pg.Stop("immediate") //nolint:errcheck // best effort
		if err := n.Close(); err != nil {
			t.Error(err)
		}
	})
	return &linkedPostgres{privatePostgres: &privatePostgres{Server: pg, url: pg.URL("postgres")},
		link: link, tcpURL: pg.URLAt(link.ServerAddr, "postgres")}
}

// sessionsOf counts the PostgreSQL sessions of a sidecar.
func sessionsOf(t *testing.T, admin *pgxpool.Pool, sidecarID string, where string) int {
	t.Helper()
	var n int
	if err := admin.QueryRow(testContext(t), `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`+where,
		"queenside/"+sidecarID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A sidecar cut off in the middle of a transaction holds a partition's row
// lock on the server: it is freed within store.IdleTransactionTimeout (a
// second after the transaction's last statement), so that another
// sidecar's push to that partition goes through; every session of the cut
// sidecar ends within store.DeadPeerBound; meanwhile its pushes are
// buffered within its own bound, and after the partition heals everything
// is stored once and the transaction not at all.
func TestPartitionedSidecarsLocksAreFreedWithinTheBound(t *testing.T) {
	pg := startLinkedPostgres(t)
	cut := pg.link
	a := launchSidecar(t, pg.tcpURL, t.TempDir(), "--database-timeout", partitionTimeout.String())
	a.waitReplayed(t)
	b := launchSidecar(t, pg.url, t.TempDir())
	b.waitReplayed(t)
	ca, cb := dialClient(t, a.socket), dialClient(t, b.socket)
	hello, err := ca.Hello(testContext(t), "test")
	if err != nil {
		t.Fatal(err)
	}
	admin := pg.pool(t)
	mustPush(t, ca, item(t, "src", "p", "s0", 0), item(t, "dst", "p0", "d-warm", 0))
	popped, err := ca.Pop(testContext(t), queenside.PopArgs{Queue: "src", Group: "g", Batch: 1})
	if err != nil || len(popped.Messages) != 1 {
		t.Fatalf("pop: %v %+v", err, popped)
	}

	// The test holds the source's cursor rows, so that sidecar a's
	// transaction, having locked dst/p0 by its push, waits at its ack.
	held, err := admin.Begin(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Rollback(context.Background()) //nolint:errcheck // committed below
	if _, err := held.Exec(testContext(t), `SELECT 1 FROM queenside.cursors c
		JOIN queenside.partitions p ON p.id = c.partition_id JOIN queenside.queues q ON q.id = p.queue_id
		WHERE q.name = 'src' FOR UPDATE OF c`); err != nil {
		t.Fatal(err)
	}
	type txAnswer struct {
		err  error
		took time.Duration
	}
	txDone := make(chan txAnswer, 1)
	go func() {
		began := time.Now()
		_, err := ca.Transaction(testContext(t), []queenside.AckItem{popped.Messages[0].Completed()},
			[]protocol.PushItem{item(t, "dst", "p0", "d-txn", 1)})
		txDone <- txAnswer{err, time.Since(began)}
	}()
	waitFor(t, partitionTimeout, "sidecar a's transaction to wait for the cursor lock", func() bool {
		return sessionsOf(t, admin, hello.SidecarID, ` AND wait_event_type = 'Lock'`) == 1
	})
	if err := cut.Cut(); err != nil {
		t.Fatal(err)
	}
	cutAt := time.Now()
	healed := false
	defer func() {
		if !healed {
			cut.Heal() //nolint:errcheck // cleanup
		}
	}()
	if err := held.Commit(testContext(t)); err != nil {
		t.Fatal(err)
	}
	// a's session now finishes its ack and waits, in its transaction, for
	// a COMMIT that never comes, holding dst/p0: until PostgreSQL ends it
	// (idle_in_transaction_session_timeout, the database timeout).
	released := time.Now()
	mustPush(t, cb, item(t, "dst", "p0", "d-b", 2))
	freed := time.Since(released)
	if idle := store.IdleTransactionTimeout(partitionTimeout); freed > idle+2*time.Second {
		t.Fatalf("another sidecar's push to the partition waited %v; PostgreSQL ends an idle transaction after %v", freed, idle)
	}
	tx := <-txDone
	var qe *queenside.Error
	if !errors.As(tx.err, &qe) || qe.Code != protocol.CodeUnavailable || tx.took > partitionTimeout+2*time.Second {
		t.Fatalf("the cut transaction: %v after %v; want unavailable within %v", tx.err, tx.took, partitionTimeout)
	}
	began := time.Now()
	if r := pushResults(t, ca, item(t, "dst", "p0", "d-a", 3))[0]; r.Status != protocol.StatusBuffered {
		t.Fatalf("a push through the cut sidecar: %s %v; want buffered", r.Status, r.Error)
	}
	pushTook := time.Since(began)
	if pushTook > partitionTimeout+2*time.Second {
		t.Fatalf("a push through the cut sidecar answered after %v; the bound is %v", pushTook, partitionTimeout)
	}
	bound := store.DeadPeerBound(partitionTimeout)
	waitFor(t, bound+5*time.Second, "every session of the cut sidecar to end", func() bool {
		return sessionsOf(t, admin, hello.SidecarID, "") == 0
	})
	gone := time.Since(cutAt)
	if err := cut.Heal(); err != nil {
		t.Fatal(err)
	}
	healed = true
	a.waitReplayed(t)
	t.Logf("cut: the transaction answered unavailable after %v; the partition's lock freed %v after the lock it waited for; "+
		"a push buffered in %v; every session gone %v after the cut (bound %v)", tx.took.Round(time.Millisecond),
		freed.Round(time.Millisecond), pushTook.Round(time.Millisecond), gone.Round(time.Millisecond), bound)

	stored := map[string]int{}
	for _, m := range storedMessages(t, admin, "dst", "p0") {
		stored[m.TransactionID]++
	}
	if stored["d-warm"] != 1 || stored["d-b"] != 1 || stored["d-a"] != 1 || stored["d-txn"] != 0 {
		t.Fatalf("dst/p0 holds %v: want d-warm, d-b and d-a once each, and nothing of the cut transaction", stored)
	}
	again, err := cb.Pop(testContext(t), queenside.PopArgs{Queue: "src", Group: "g", Batch: 1, LeaseSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	_ = again // the lease of the first pop may still be live: the cursor is read below
	var cursor int64
	if err := admin.QueryRow(testContext(t), `SELECT c.committed FROM queenside.cursors c
		JOIN queenside.groups g ON g.id = c.group_id WHERE g.name = 'g'`).Scan(&cursor); err != nil {
		t.Fatal(err)
	}
	if cursor != 0 {
		t.Fatalf("the source's cursor is at %d: the cut transaction's ack committed", cursor)
	}
}

// The notification listener of a cut sidecar notices the silence and
// connects again once the partition heals; a long-poll over the cut is
// answered by its waitMs; and after it heals a push through another
// sidecar wakes a long-poll on this one.
func TestListenerComesBackAfterAPartition(t *testing.T) {
	pg := startLinkedPostgres(t)
	a := launchSidecar(t, pg.tcpURL, t.TempDir(), "--database-timeout", partitionTimeout.String())
	a.waitReplayed(t)
	b := launchSidecar(t, pg.url, t.TempDir())
	b.waitReplayed(t)
	ca, cb := dialClient(t, a.socket), dialClient(t, b.socket)
	mustPush(t, cb, item(t, "w", "p", "w0", 0))
	if _, err := ca.Pop(testContext(t), queenside.PopArgs{Queue: "w", AutoAck: true}); err != nil {
		t.Fatal(err)
	}

	type popAnswer struct {
		err  error
		n    int
		took time.Duration
	}
	waiting := make(chan popAnswer, 1)
	go func() {
		began := time.Now()
		res, err := ca.Pop(testContext(t), queenside.PopArgs{Queue: "w", WaitMs: 4000})
		waiting <- popAnswer{err, len(res.Messages), time.Since(began)}
	}()
	time.Sleep(200 * time.Millisecond)
	if err := pg.link.Cut(); err != nil {
		t.Fatal(err)
	}
	cutAt := time.Now()
	lp := <-waiting
	var qe *queenside.Error
	if (lp.err != nil && !errors.As(lp.err, &qe)) || lp.n != 0 || lp.took > 4*time.Second+time.Second {
		t.Fatalf("a long-poll of 4 s over the cut: %d messages, %v, after %v; want an answer by its waitMs", lp.n, lp.err, lp.took)
	}
	waitFor(t, 2*partitionTimeout+3*time.Second, "the listener to notice the silence", func() bool {
		return strings.Contains(a.logText(), "notification listener lost its connection")
	})
	noticed := time.Since(cutAt)
	time.Sleep(time.Until(cutAt.Add(8 * time.Second)))
	if err := pg.link.Heal(); err != nil {
		t.Fatal(err)
	}
	healedAt := time.Now()
	waitFor(t, 20*time.Second, "the listener to connect again", func() bool {
		return strings.Contains(a.logText(), "notification listener connected again")
	})
	back := time.Since(healedAt)
	a.waitReplayed(t)

	woken := make(chan popAnswer, 1)
	go func() {
		began := time.Now()
		res, err := ca.Pop(testContext(t), queenside.PopArgs{Queue: "w", WaitMs: 10000})
		woken <- popAnswer{err, len(res.Messages), time.Since(began)}
	}()
	time.Sleep(300 * time.Millisecond)
	mustPush(t, cb, item(t, "w", "p", "w1", 1))
	w := <-woken
	if w.err != nil || w.n != 1 || w.took > 3*time.Second {
		t.Fatalf("a long-poll after the heal, woken by a push through another sidecar: %d messages, %v, after %v", w.n, w.err, w.took)
	}
	t.Logf("a long-poll over the cut answered after %v (%v); the listener noticed the cut after %v and was back %v after the heal",
		lp.took.Round(time.Millisecond), lp.err, noticed.Round(time.Millisecond), back.Round(time.Millisecond))
}
