package sidecar

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/pgtest"
)

func boolPtr(v bool) *bool { return &v }

// numberedItems are count items for queue/partition, payloads from..from+count-1.
func numberedItems(t *testing.T, queue, partition string, from, count int) []protocol.PushItem {
	t.Helper()
	items := make([]protocol.PushItem, count)
	for k := range items {
		items[k] = item(t, queue, partition, fmt.Sprintf("%s-%d", partition, from+k), from+k)
	}
	return items
}

// pushEach pushes items one request each and checks every answer's status.
func pushEach(t *testing.T, c *queenside.Client, want string, items []protocol.PushItem) {
	t.Helper()
	for _, it := range items {
		res, err := c.Push(testContext(t), it)
		if err != nil {
			t.Fatalf("push %s: %v", it.TransactionID, err)
		}
		if res[0].Status != want {
			t.Fatalf("push %s answered %s %v, want %s", it.TransactionID, res[0].Status, res[0].Error, want)
		}
	}
}

// waitApplied waits until a sidecar's health shows the maintenance state
// want, and returns how long that took from since.
func waitApplied(t *testing.T, p *sidecarProcess, since time.Time, want func(*protocol.MaintenanceState) bool) time.Duration {
	t.Helper()
	waitFor(t, 5*time.Second, "the maintenance state to be applied", func() bool {
		return want(p.health(t).Maintenance)
	})
	return time.Since(since)
}

func pushOn(m *protocol.MaintenanceState) bool  { return m != nil && m.Push }
func pushOff(m *protocol.MaintenanceState) bool { return m != nil && !m.Push }
func popOn(m *protocol.MaintenanceState) bool   { return m != nil && m.Pop }

func TestPushMaintenanceSpoolsEveryPushAndReplaysItAfter(t *testing.T) {
	db := pgtest.NewDatabase(t)
	pool := pgtest.Pool(t, db)
	// Three sidecars; the third has no listener and learns by looking.
	spools := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	sidecars := []*sidecarProcess{
		launchSidecar(t, db, spools[0]),
		launchSidecar(t, db, spools[1]),
		launchSidecar(t, db, spools[2], "--listen-database-url", "none"),
	}
	clients := make([]*queenside.Client, len(sidecars))
	for i, sc := range sidecars {
		waitFor(t, 30*time.Second, "the sidecar to be ready", func() bool { return healthy(sc.socket) })
		clients[i] = dialClient(t, sc.socket)
	}
	// Each sidecar stores 5 messages in a partition of its own...
	const before, during = 5, 20
	for i, c := range clients {
		pushEach(t, c, protocol.StatusQueued, numberedItems(t, "m", fmt.Sprintf("p%d", i), 0, before))
	}

	// ... then maintenance is turned on through the first one.
	began := time.Now()
	m, err := clients[0].Maintenance(testContext(t), boolPtr(true), nil)
	if err != nil || !m.Push || m.PushSince == nil || m.Pop {
		t.Fatalf("maintenance on: %+v %v", m, err)
	}
	for i, sc := range sidecars {
		took := waitApplied(t, sc, began, pushOn)
		t.Logf("sidecar %d applied push maintenance %.2f s after it was turned on", i, took.Seconds())
		if took > 2500*time.Millisecond {
			t.Errorf("sidecar %d took %v to apply push maintenance, want within 2 s", i, took)
		}
	}
	// Every push is buffered in its sidecar's spool, and nothing is stored.
	for i, c := range clients {
		pushEach(t, c, protocol.StatusBuffered, numberedItems(t, "m", fmt.Sprintf("p%d", i), before, during))
	}
	if _, err := clients[1].Transaction(testContext(t), nil, numberedItems(t, "m", "tx", 0, 1)); !isCode(err, protocol.CodeUnavailable) {
		t.Fatalf("a transaction during push maintenance: %v, want unavailable", err)
	}
	for i, sc := range sidecars {
		if h := sc.health(t); h.Spool.Records != during {
			t.Fatalf("sidecar %d spools %d records, want %d", i, h.Spool.Records, during)
		}
	}
	sidecars[0].wantMetrics(t, "queenside_maintenance_push 1", "queenside_maintenance_pop 0")

	// The second sidecar is killed with its spool full of the maintenance's
	// pushes, and comes back while maintenance is still on: it holds them,
	// and spools what it is given.
	sidecars[1].kill(t)
	sidecars[1] = launchSidecar(t, db, spools[1])
	waitFor(t, 30*time.Second, "the restarted sidecar to be ready", func() bool { return healthy(sidecars[1].socket) })
	clients[1] = dialClient(t, sidecars[1].socket)
	if h := sidecars[1].health(t); h.Maintenance == nil || !h.Maintenance.Push || h.Spool.Records != during {
		t.Fatalf("the restarted sidecar: %+v", h)
	}
	pushEach(t, clients[1], protocol.StatusBuffered, numberedItems(t, "m", "p1", before+during, 5))
	// A sidecar new to the database honours it from its first push.
	late := launchSidecar(t, db, t.TempDir())
	waitFor(t, 30*time.Second, "the new sidecar to be ready", func() bool { return healthy(late.socket) })
	pushEach(t, dialClient(t, late.socket), protocol.StatusBuffered, numberedItems(t, "m", "late", 0, 3))
	time.Sleep(1500 * time.Millisecond) // a replay pass would have run by now
	for i := range sidecars {
		if n := len(storedMessages(t, pool, "m", fmt.Sprintf("p%d", i))); n != before {
			t.Fatalf("partition p%d holds %d messages during push maintenance, want %d", i, n, before)
		}
	}

	// Turned off: every spool is replayed, and each partition holds every
	// message once, in the order it was pushed.
	began = time.Now()
	if m, err := clients[2].Maintenance(testContext(t), boolPtr(false), nil); err != nil || m.Push || m.PushSince != nil {
		t.Fatalf("maintenance off: %+v %v", m, err)
	}
	for _, sc := range append(sidecars, late) {
		waitApplied(t, sc, began, pushOff)
		sc.waitReplayed(t)
	}
	t.Logf("every spool replayed %.2f s after maintenance was turned off", time.Since(began).Seconds())
	want := map[string]int{"p0": before + during, "p1": before + during + 5, "p2": before + during, "late": 3}
	for partition, n := range want {
		byTx := checkGapless(t, storedMessages(t, pool, "m", partition), n)
		for k := range n {
			if m, ok := byTx[fmt.Sprintf("%s-%d", partition, k)]; !ok || m.Offset != int64(k) {
				t.Fatalf("%s: message %d stored at %+v, want offset %d", partition, k, m, k)
			}
		}
	}
	pushEach(t, clients[0], protocol.StatusQueued, numberedItems(t, "m", "p0", before+during, 1))
}

func TestPopMaintenanceAndPausedQueuesDeliverNothing(t *testing.T) {
	db := pgtest.NewDatabase(t)
	a := launchSidecar(t, db, t.TempDir())
	b := launchSidecar(t, db, t.TempDir(), "--listen-database-url", "none")
	for _, sc := range []*sidecarProcess{a, b} {
		waitFor(t, 30*time.Second, "the sidecar to be ready", func() bool { return healthy(sc.socket) })
	}
	ca, cb := dialClient(t, a.socket), dialClient(t, b.socket)
	for _, q := range []string{"q1", "q2"} {
		pushEach(t, ca, protocol.StatusQueued, numberedItems(t, q, "p", 0, 4))
	}
	// A lease taken before maintenance is acked during it.
	held := mustPop(t, ca, protocol.PopArgs{Queue: "q1", Group: "g", Batch: 1})
	if len(held.Messages) != 1 {
		t.Fatalf("pop before maintenance: %+v", held)
	}

	began := time.Now()
	if m, err := ca.Maintenance(testContext(t), nil, boolPtr(true)); err != nil || !m.Pop || m.Push {
		t.Fatalf("pop maintenance on: %+v %v", m, err)
	}
	if took := waitApplied(t, b, began, popOn); took > 2500*time.Millisecond {
		t.Errorf("pop maintenance applied after %v, want within 2 s", took)
	}
	for _, c := range []*queenside.Client{ca, cb} {
		res := mustPop(t, c, protocol.PopArgs{Queue: "q2", Group: "g", Batch: 10})
		if len(res.Messages) != 0 || !res.Paused {
			t.Fatalf("pop during pop maintenance: %d messages, paused %v", len(res.Messages), res.Paused)
		}
	}
	// A long-poll waits out its waitMs, then answers paused.
	t0 := time.Now()
	res := mustPop(t, cb, protocol.PopArgs{Queue: "q2", Group: "g", WaitMs: 400})
	if waited := time.Since(t0); len(res.Messages) != 0 || !res.Paused || waited < 350*time.Millisecond {
		t.Fatalf("a long-poll during pop maintenance: %d messages, paused %v, after %v", len(res.Messages), res.Paused, waited)
	}
	if ar := mustAck(t, ca, queenside.Completed(held.Messages[0])); !ar.Results[0].Success {
		t.Fatalf("an ack during pop maintenance: %+v", ar.Results)
	}
	b.wantMetrics(t, "queenside_maintenance_pop 1")
	// The CLI shows the state.
	out, err := exec.Command(queensideBinary(t), "maintenance", "--socket", b.socket).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "pop   on since") || !strings.Contains(string(out), "push  off") {
		t.Fatalf("queenside maintenance: %v\n%s", err, out)
	}

	// A long-poll waiting on b delivers once pop maintenance is turned off
	// through a; b has no listener and learns it by looking.
	type popped struct {
		res protocol.PopResult
		at  time.Time
		err error
	}
	done := make(chan popped, 1)
	go func() {
		res, err := cb.Pop(testContext(t), protocol.PopArgs{Queue: "q2", Group: "g", Batch: 10, WaitMs: 15000})
		done <- popped{res, time.Now(), err}
	}()
	time.Sleep(300 * time.Millisecond)
	out, err = exec.Command(queensideBinary(t), "maintenance", "off", "--pop", "--socket", a.socket).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "pop   off") {
		t.Fatalf("queenside maintenance off --pop: %v\n%s", err, out)
	}
	off := time.Now()
	got := <-done
	if got.err != nil || len(got.res.Messages) != 4 || got.res.Paused {
		t.Fatalf("the waiting pop after maintenance: %+v %v", got.res, got.err)
	}
	t.Logf("a long-poll delivered %.2f s after pop maintenance was turned off", got.at.Sub(off).Seconds())
	if d := got.at.Sub(off); d > 2500*time.Millisecond {
		t.Errorf("the waiting pop delivered %v after maintenance ended, want within 2 s", d)
	}

	// Pausing one queue: no group's pop delivers it, other queues do.
	out, err = exec.Command(queensideBinary(t), "configure", "--queue", "q1", "--pause", "--socket", a.socket).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "consumption paused") {
		t.Fatalf("queenside configure --pause: %v\n%s", err, out)
	}
	paused := time.Now()
	waitFor(t, 5*time.Second, "b to apply the pause", func() bool {
		return mustPop(t, cb, protocol.PopArgs{Queue: "q1", Group: "other", Batch: 10}).Paused
	})
	if d := time.Since(paused); d > 2500*time.Millisecond {
		t.Errorf("the pause reached b after %v, want within 2 s", d)
	}
	for _, c := range []*queenside.Client{ca, cb} {
		if res := mustPop(t, c, protocol.PopArgs{Queue: "q1", Group: "g", Batch: 10, AutoAck: true}); len(res.Messages) != 0 || !res.Paused {
			t.Fatalf("a pop of the paused queue: %d messages, paused %v", len(res.Messages), res.Paused)
		}
	}
	pushEach(t, ca, protocol.StatusQueued, numberedItems(t, "q2", "p", 4, 1))
	if res := mustPop(t, ca, protocol.PopArgs{Queue: "q2", Group: "g2", Batch: 10, AutoAck: true}); len(res.Messages) != 5 || res.Paused {
		t.Fatalf("another queue while q1 is paused: %d messages, paused %v", len(res.Messages), res.Paused)
	}
	if qs, err := cb.Queues(testContext(t)); err != nil || !qs[0].Options.ConsumptionPaused || qs[1].Options.ConsumptionPaused {
		t.Fatalf("queues: %+v %v", qs, err)
	}
	// Resumed: a long-poll waiting on the paused queue is woken.
	go func() {
		res, err := ca.Pop(testContext(t), protocol.PopArgs{Queue: "q1", Group: "g", Batch: 10, WaitMs: 15000})
		done <- popped{res, time.Now(), err}
	}()
	time.Sleep(300 * time.Millisecond)
	opts := queenside.DefaultQueueOptions()
	if got, err := cb.Configure(testContext(t), "q1", opts); err != nil || got.ConsumptionPaused {
		t.Fatalf("resume: %+v %v", got, err)
	}
	resumed := time.Now()
	got = <-done
	if got.err != nil || len(got.res.Messages) != 3 || got.res.Paused {
		t.Fatalf("the waiting pop after the resume: %+v %v", got.res, got.err)
	}
	t.Logf("a long-poll on the paused queue delivered %.2f s after the resume", got.at.Sub(resumed).Seconds())
}
