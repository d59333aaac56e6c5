package sidecar

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
)

const (
	outageItems = 10000
	outageBatch = 100
	outageParts = 4
)

// pushAll pushes items from..to in batches on one connection, in order,
// and returns how many were buffered. onBatch runs before each batch with
// the number pushed so far. A batch whose call fails is returned in
// failedFrom (the first item of each), for the caller to retry.
func pushAll(t *testing.T, c *queenside.Client, queue string, from, to int, onBatch func(done int)) (buffered int, failedFrom []int) {
	t.Helper()
	for k := from; k < to; k += outageBatch {
		if onBatch != nil {
			onBatch(k)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		res, err := c.Push(ctx, numbered(t, queue, k, min(outageBatch, to-k), outageParts)...)
		cancel()
		if err != nil {
			failedFrom = append(failedFrom, k)
			continue
		}
		for _, r := range res {
			switch r.Status {
			case protocol.StatusBuffered:
				buffered++
				if r.MessageID == "" || r.TransactionID == "" || r.Offset != nil {
					t.Fatalf("buffered result %+v: want messageId and transactionId, no offset", r)
				}
			case protocol.StatusQueued:
			default:
				t.Fatalf("item %d of batch %d: %s %v; want queued or buffered", r.Index, k, r.Status, r.Error)
			}
		}
	}
	return buffered, failedFrom
}

func TestPushesThroughAnOutageAreStoredOnceInOrder(t *testing.T) {
	pg := startPrivatePostgres(t)
	sc := launchSidecar(t, pg.url, t.TempDir())
	sc.waitReplayed(t) // migrated: the first pushes reach the database
	c := dialClient(t, sc.socket)
	stopped := make(chan struct{})
	buffered, failed := pushAll(t, c, "outage", 0, outageItems, func(done int) {
		if done == 3000 { // part way, with pushes in flight around it
			go func() {
				if err := pg.Stop("immediate"); err != nil {
					t.Error(err)
				}
				close(stopped)
			}()
		}
	})
	<-stopped
	if len(failed) > 0 || buffered == 0 {
		t.Fatalf("%d buffered, calls failed at %v: want every item queued or buffered, some buffered", buffered, failed)
	}
	h := sc.health(t)
	if h.Status != protocol.HealthUnavailable || h.Spool.Records != int64(buffered) || h.Spool.OldestAt == nil {
		t.Fatalf("health during the outage: %+v, want unavailable with %d spooled", h, buffered)
	}
	t.Logf("%d of %d items buffered while PostgreSQL was down", buffered, outageItems)
	pg.restart(t)
	sc.waitReplayed(t)
	checkStoredOnceInOrder(t, pg.pool(t), "outage", outageItems, outageParts, nil)
}

func TestSidecarKilledWithBufferedPushesLosesNothing(t *testing.T) {
	pg := startPrivatePostgres(t)
	spoolDir := t.TempDir()
	sc := launchSidecar(t, pg.url, spoolDir)
	sc.waitReplayed(t)
	c := dialClient(t, sc.socket)
	buffered, failed := pushAll(t, c, "killed", 0, 6000, func(done int) {
		switch done {
		case 2000:
			pg.stop(t)
		case 5000: // buffered records exist by now; kill with pushes flowing
			go sc.cmd.Process.Kill() //nolint:errcheck // the pushes see it
		}
	})
	if buffered == 0 || len(failed) == 0 {
		t.Fatalf("%d buffered, %d calls failed: the kill should have cut some pushes", buffered, len(failed))
	}
	t.Logf("killed with %d items buffered; %d calls cut", buffered, len(failed))

	// The restarted sidecar finds the spool; the client retries what it got
	// no answer for, with the same transaction ids, then goes on.
	sc2 := launchSidecar(t, pg.url, spoolDir)
	if h := sc2.health(t); h.Spool.Records == 0 {
		t.Fatalf("the restarted sidecar found an empty spool: %+v", h)
	}
	c2 := dialClient(t, sc2.socket)
	for _, k := range failed {
		if _, f := pushAll(t, c2, "killed", k, k+outageBatch, nil); len(f) > 0 {
			t.Fatalf("retry of batch %d failed", k)
		}
	}
	if _, f := pushAll(t, c2, "killed", 6000, outageItems, nil); len(f) > 0 {
		t.Fatalf("pushes after the restart failed at %v", f)
	}
	pg.restart(t)
	sc2.waitReplayed(t)
	checkStoredOnceInOrder(t, pg.pool(t), "killed", outageItems, outageParts, nil)
}

func TestProbesAndMetricsDuringAnOutage(t *testing.T) {
	pg := startPrivatePostgres(t)
	sc := launchSidecar(t, pg.url, t.TempDir())
	sc.waitReplayed(t) // migrated
	if got := sc.httpStatus(t, "/health"); got != http.StatusOK {
		t.Fatalf("/health with PostgreSQL up: %d", got)
	}
	c := dialClient(t, sc.socket)
	pushAll(t, c, "probe", 0, 100, nil)
	pg.stop(t)
	if got := sc.httpStatus(t, "/health"); got != http.StatusServiceUnavailable {
		t.Fatalf("/health with PostgreSQL down: %d, want 503", got)
	}
	if got := sc.httpStatus(t, "/live"); got != http.StatusOK {
		t.Fatalf("/live with PostgreSQL down: %d, want 200", got)
	}
	if _, err := c.Pop(testContext(t), protocol.PopArgs{Queue: "probe"}); !isCode(err, protocol.CodeUnavailable) {
		t.Fatalf("pop with PostgreSQL down: %v, want unavailable", err)
	}
	if buffered, _ := pushAll(t, c, "probe", 100, 300, nil); buffered != 200 {
		t.Fatalf("%d buffered, want 200", buffered)
	}
	sc.wantMetrics(t,
		`queenside_database_up 0`,
		`queenside_spool_records 200`,
		`queenside_push_items_total{status="buffered"} 200`,
		`queenside_push_items_total{status="queued"} 100`,
		`queenside_requests_total{code="unavailable",op="pop"} 1`,
		`queenside_connections 1`)
	pg.restart(t)
	waitFor(t, 30*time.Second, "/health to answer 200", func() bool { return sc.httpStatus(t, "/health") == http.StatusOK })
	if got := sc.httpStatus(t, "/live"); got != http.StatusOK {
		t.Fatalf("/live after: %d", got)
	}
	sc.waitReplayed(t)
	sc.wantMetrics(t, `queenside_database_up 1`, `queenside_spool_records 0`, `queenside_spool_replayed_total 200`)
	checkStoredOnceInOrder(t, pg.pool(t), "probe", 300, outageParts, nil)
}

func TestStartingDuringAnOutage(t *testing.T) {
	pg := startPrivatePostgres(t)
	pg.stop(t) // down before the sidecar ever saw it: nothing migrated
	sc := launchSidecar(t, pg.url, t.TempDir())
	c := dialClient(t, sc.socket)
	if buffered, failed := pushAll(t, c, "cold", 0, 1000, nil); buffered != 1000 || len(failed) > 0 {
		t.Fatalf("%d buffered, failed calls %v: want all buffered", buffered, failed)
	}
	if _, err := c.Pop(testContext(t), protocol.PopArgs{Queue: "cold"}); !isCode(err, protocol.CodeUnavailable) {
		t.Fatalf("pop before the database ever answered: %v, want unavailable", err)
	}
	if h := sc.health(t); h.Status != protocol.HealthUnavailable || h.Spool.Records != 1000 {
		t.Fatalf("health: %+v", h)
	}
	time.Sleep(time.Second) // the sidecar keeps serving, retrying its migration
	select {
	case <-sc.exited:
		t.Fatal("the sidecar exited while the database was down")
	default:
	}
	pg.restart(t)
	sc.waitReplayed(t)
	checkStoredOnceInOrder(t, pg.pool(t), "cold", 1000, outageParts, nil)
}

func TestFullSpoolRefusesAndKeepsWhatItHas(t *testing.T) {
	pg := startPrivatePostgres(t)
	sc := launchSidecar(t, pg.url, t.TempDir(), "--spool-max-bytes", "200000")
	sc.waitReplayed(t)
	c := dialClient(t, sc.socket)
	pushAll(t, c, "full", 0, 100, nil) // creates the queue while PostgreSQL is up
	pg.stop(t)
	var buffered, full int
	var skip = map[int]bool{}
	for k := 100; k < 3000; k += 10 {
		res, err := c.Push(testContext(t), numbered(t, "full", k, 10, outageParts)...)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			switch {
			case r.Status == protocol.StatusBuffered:
				buffered++
			case r.Status == protocol.StatusFailed && r.Error.Code == protocol.CodeSpoolFull && r.Error.Retryable:
				full++
				skip[k+r.Index] = true
			default:
				t.Fatalf("item %d: %s %v", k+r.Index, r.Status, r.Error)
			}
		}
	}
	if full == 0 || buffered == 0 {
		t.Fatalf("%d buffered, %d refused spool_full: the 200,000-byte spool should fill", buffered, full)
	}
	t.Logf("%d buffered, then %d refused with spool_full", buffered, full)
	pg.restart(t)
	sc.waitReplayed(t)
	checkStoredOnceInOrder(t, pg.pool(t), "full", 3000, outageParts, skip)
}

func TestSigtermDuringPushesAndAcksLosesNothing(t *testing.T) {
	pg := startPrivatePostgres(t)
	sc := launchSidecar(t, pg.url, t.TempDir())
	sc.waitReplayed(t)
	ctx := context.Background()
	var queued, ackedCount atomic.Int64
	var mu sync.Mutex
	var answeredQueued []string
	var acked []protocol.Message
	done := make(chan struct{}, 4)
	for w := 0; w < 2; w++ { // producers
		c := dialClient(t, sc.socket)
		go func(w int) {
			defer func() { done <- struct{}{} }()
			for k := w * 1000000; ; k += 10 {
				res, err := c.Push(ctx, numbered(t, "term", k, 10, outageParts)...)
				if err != nil {
					return // draining or closed: not answered queued
				}
				for _, r := range res {
					if r.Status == protocol.StatusQueued {
						queued.Add(1)
						mu.Lock()
						answeredQueued = append(answeredQueued, r.TransactionID)
						mu.Unlock()
					}
				}
			}
		}(w)
	}
	for w := 0; w < 2; w++ { // consumers
		c := dialClient(t, sc.socket)
		go func() {
			defer func() { done <- struct{}{} }()
			for {
				res, err := c.Pop(ctx, protocol.PopArgs{Queue: "term", Group: "g", Batch: 20, WaitMs: 200})
				if err != nil {
					return
				}
				if len(res.Messages) == 0 {
					continue
				}
				items := make([]protocol.AckItem, len(res.Messages))
				for i, m := range res.Messages {
					items[i] = protocol.AckItem{LeaseID: m.LeaseID, Offset: &res.Messages[i].Offset}
				}
				ar, err := c.Ack(ctx, items...)
				if err != nil {
					return
				}
				mu.Lock()
				for i, r := range ar.Results {
					if r.Success {
						ackedCount.Add(1)
						acked = append(acked, res.Messages[i])
					}
				}
				mu.Unlock()
			}
		}()
	}
	waitFor(t, 30*time.Second, "traffic", func() bool { return queued.Load() > 2000 && ackedCount.Load() > 500 })
	sc.terminate(t)
	for i := 0; i < 4; i++ {
		<-done
	}
	pool := pg.pool(t)
	storedTx := map[string]bool{}
	for p := 0; p < outageParts; p++ {
		for _, m := range storedMessages(t, pool, "term", "p"+string(rune('0'+p))) {
			storedTx[m.TransactionID] = true
		}
	}
	n := 0
	for _, tx := range answeredQueued {
		if !storedTx[tx] {
			t.Fatalf("%s was answered queued but is not stored", tx)
		}
		n++
	}
	cursors := map[string]int64{}
	rows, err := pool.Query(ctx, `SELECT p.name, c.committed FROM queenside.cursors c
		JOIN queenside.partitions p ON p.id = c.partition_id JOIN queenside.groups g ON g.id = c.group_id WHERE g.name = 'g'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name string
		var committed int64
		if err := rows.Scan(&name, &committed); err != nil {
			t.Fatal(err)
		}
		cursors[name] = committed
	}
	rows.Close()
	a := 0
	for _, m := range acked {
		if m.Offset >= cursors[m.Partition] {
			t.Fatalf("offset %d of %s was answered acked, but the cursor is at %d", m.Offset, m.Partition, cursors[m.Partition])
		}
		a++
	}
	t.Logf("after SIGTERM: %d pushes answered queued are stored, %d acks answered success are behind the cursors", n, a)
}

func TestSpoolOlderThanTheDedupWindowIsReported(t *testing.T) {
	pg := startPrivatePostgres(t)
	sc := launchSidecar(t, pg.url, t.TempDir())
	sc.waitReplayed(t) // migrated
	c := dialClient(t, sc.socket)
	configure(t, c, "stale", func(o *protocol.QueueOptions) { o.DedupWindowSeconds = 1 })
	// The sidecar reads the queues' windows when 5 s have passed since the
	// last read, looking once a second: a read that came just before the
	// configure is followed by one at most 6 s later.
	time.Sleep(7500 * time.Millisecond)
	pg.stop(t)
	if buffered, _ := pushAll(t, c, "stale", 0, 10, nil); buffered != 10 {
		t.Fatalf("%d buffered, want 10", buffered)
	}
	waitFor(t, 10*time.Second, "health to warn of the dedup window", func() bool {
		return strings.Contains(strings.Join(sc.health(t).Spool.Warnings, " "), "dedup window")
	})
	pg.restart(t)
	sc.waitReplayed(t)
	if !strings.Contains(sc.logText(), "older than the smallest dedup window") {
		t.Fatalf("the log does not warn of the dedup window:\n%s", sc.logText())
	}
	if h := sc.health(t); len(h.Spool.Warnings) != 0 {
		t.Fatalf("warnings after the spool drained: %v", h.Spool.Warnings)
	}
}

func TestSidecarKilledMidReplayResumes(t *testing.T) {
	const total = 40000
	pg := startPrivatePostgres(t)
	spoolDir := t.TempDir()
	sc := launchSidecar(t, pg.url, spoolDir)
	sc.waitReplayed(t)
	c := dialClient(t, sc.socket)
	pushAll(t, c, "midreplay", 0, 100, nil) // the queue exists
	pg.stop(t)
	if buffered, failed := pushAll(t, c, "midreplay", 100, total, nil); buffered != total-100 || len(failed) > 0 {
		t.Fatalf("%d buffered, failed calls %v", buffered, failed)
	}
	pg.restart(t)
	// Kill as soon as replay has stored some of the spool, not all.
	waitFor(t, 60*time.Second, "replay to begin", func() bool {
		n := sc.health(t).Spool.Records
		return n > 0 && n < total-100
	})
	sc.kill(t)
	sc2 := launchSidecar(t, pg.url, spoolDir)
	h := sc2.health(t)
	if h.Spool.Records == 0 || h.Spool.Records >= total-100 {
		t.Fatalf("after the kill the spool holds %d records: want the part not yet replayed", h.Spool.Records)
	}
	t.Logf("killed mid-replay with %d of %d records left", h.Spool.Records, total-100)
	sc2.waitReplayed(t)
	checkStoredOnceInOrder(t, pg.pool(t), "midreplay", total, outageParts, nil)
}
