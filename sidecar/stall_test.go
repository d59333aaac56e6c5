package sidecar

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
)

// A database that stops answering without an error: every PostgreSQL
// process stopped with SIGSTOP (pgserver.Freeze), which keeps the sockets
// open and answers nothing, as a frozen host does.

// stallTimeout is the sidecars' --database-timeout in these tests: short,
// so that a stall of a few seconds outlasts it several times over.
const stallTimeout = time.Second

// answer is one push as its client saw it.
type answer struct {
	k      int // the item's number
	status string
	err    *protocol.Error
	took   time.Duration
	at     time.Time // when the answer came
}

// answers records what a pusher was answered, for the test to read while
// it pushes.
type answers struct {
	mu  sync.Mutex
	all []answer
}

func (l *answers) add(a answer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all = append(l.all, a)
}

func (l *answers) last() answer {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.all); n > 0 {
		return l.all[n-1]
	}
	return answer{}
}

func (l *answers) list() []answer {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]answer(nil), l.all...)
}

// pushOneByOne pushes numbered items one a request, in order, until stop
// is closed, recording every answer.
func pushOneByOne(t *testing.T, c *queenside.Client, queue string, parts int, stop <-chan struct{}, log *answers) {
	for k := 0; ; k++ {
		select {
		case <-stop:
			return
		default:
		}
		began := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		res, err := c.Push(ctx, numbered(t, queue, k, 1, parts)...)
		cancel()
		if err != nil {
			t.Errorf("push %d: %v", k, err)
			return
		}
		log.add(answer{k: k, status: res[0].Status, err: res[0].Error, took: time.Since(began), at: time.Now()})
		time.Sleep(20 * time.Millisecond)
	}
}

func TestPushesDuringAStallAreBufferedWithinTheBoundAndStoredOnce(t *testing.T) {
	pg := startPrivatePostgres(t)
	sc := launchSidecar(t, pg.url, t.TempDir(), "--database-timeout", stallTimeout.String())
	sc.waitReplayed(t)
	c := dialClient(t, sc.socket)
	const parts = 3
	configure(t, c, "stall", func(*protocol.QueueOptions) {})
	mustPush(t, c, item(t, "waiting", "p", "w0", 0)) // a queue for the long-poll, with its message taken
	if _, err := c.Pop(testContext(t), queenside.PopArgs{Queue: "waiting", Batch: 10, AutoAck: true}); err != nil {
		t.Fatal(err)
	}

	stop := make(chan struct{})
	var log answers
	pushed := make(chan struct{})
	go func() { defer close(pushed); pushOneByOne(t, c, "stall", parts, stop, &log) }()
	time.Sleep(500 * time.Millisecond)

	// A long-poll that began before the stall is answered at its waitMs.
	type popAnswer struct {
		res  protocol.PopResult
		err  error
		took time.Duration
	}
	longPoll := make(chan popAnswer, 1)
	go func() {
		began := time.Now()
		res, err := dialClient(t, sc.socket).Pop(testContext(t), queenside.PopArgs{Queue: "waiting", WaitMs: 2500})
		longPoll <- popAnswer{res, err, time.Since(began)}
	}()
	time.Sleep(300 * time.Millisecond)

	if err := pg.Freeze(); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	thawed := false
	defer func() {
		if !thawed {
			pg.Thaw() //nolint:errcheck // the test failed; let the cleanup stop it
		}
	}()

	// A pop and an ack answer unavailable within the bound.
	began := time.Now()
	_, err := c.Pop(testContext(t), queenside.PopArgs{Queue: "stall"})
	var qe *queenside.Error
	if !errors.As(err, &qe) || qe.Code != protocol.CodeUnavailable || !qe.Retryable {
		t.Errorf("a pop during the stall: %v; want unavailable", err)
	}
	if took := time.Since(began); took > stallTimeout+2*time.Second {
		t.Errorf("a pop during the stall answered after %v; the bound is %v", took, stallTimeout)
	}
	// Its looks go unanswered: it ends empty at its waitMs, or sooner,
	// unavailable, when a look outlasts the bound; never later.
	lp := <-longPoll
	if (lp.err != nil && !errors.As(lp.err, &qe)) || len(lp.res.Messages) != 0 || lp.took > 2500*time.Millisecond+time.Second {
		t.Errorf("a long-poll of 2500 ms over the stall: %d messages, %v, after %v; want an answer by its waitMs",
			len(lp.res.Messages), lp.err, lp.took)
	}
	t.Logf("a long-poll of 2500 ms over the stall answered after %v: %v", lp.took.Round(time.Millisecond), lp.err)

	waitFor(t, 20*time.Second, "health to say pushes are spooled for a timeout", func() bool {
		h := sc.health(t)
		return h.Status == protocol.HealthUnavailable && h.Spool.Cause == protocol.SpoolCauseTimeout && h.Spool.Spooled[protocol.SpoolCauseTimeout] > 0
	})
	// The dashboard's Spool page reads the same.
	var spool struct {
		Cause   string
		Spooled map[string]int
	}
	body := sc.httpGet(t, "/api/spool")
	if err := json.Unmarshal([]byte(body), &spool); err != nil || spool.Cause != "timeout" || spool.Spooled["timeout"] == 0 {
		t.Fatalf("/api/spool during the stall: %s", body)
	}
	time.Sleep(time.Until(frozen.Add(6 * time.Second)))
	if err := pg.Thaw(); err != nil {
		t.Fatal(err)
	}
	thawed = true
	resumed := time.Now()
	waitFor(t, 30*time.Second, "a push answered queued after the thaw", func() bool {
		return log.last().status == protocol.StatusQueued
	})
	close(stop)
	<-pushed
	all := log.list()

	var slowest time.Duration
	var buffered, queuedAgain int
	firstQueued := time.Duration(-1)
	for _, a := range all {
		switch a.status {
		case protocol.StatusBuffered:
			buffered++
		case protocol.StatusQueued:
			if a.at.After(resumed) {
				queuedAgain++
				if firstQueued < 0 {
					firstQueued = a.at.Sub(resumed)
				}
			}
		default:
			t.Fatalf("item %d: %s %v; want queued or buffered", a.k, a.status, a.err)
		}
		slowest = max(slowest, a.took)
	}
	if buffered == 0 {
		t.Fatal("no push was answered buffered during a 6 s stall")
	}
	if slowest > stallTimeout+2*time.Second {
		t.Fatalf("the slowest push took %v; the bound is %v", slowest, stallTimeout)
	}
	t.Logf("a 6 s stall: %d pushes, %d buffered, the slowest answered in %v; queued again %v after the thaw",
		len(all), buffered, slowest.Round(time.Millisecond), firstQueued.Round(time.Millisecond))
	sc.waitReplayed(t)
	sc.wantMetricAbove(t, "queenside_database_timeouts_total", 0)
	sc.wantMetricAbove(t, `queenside_push_items_spooled_total{cause="timeout"}`, 0)
	checkStoredOnceInOrder(t, pg.pool(t), "stall", len(all), parts, nil)
}

// In a queue without deduplication, a push that was sent and never
// answered may have committed: it is not spooled, since its replay could
// store it twice; it fails with unavailable and says the outcome is
// unknown. Pushes that never reach the database (the outage already
// known) are spooled as usual, and nothing is stored twice.
func TestPushWithoutDedupSentDuringAStallFailsWithAnUnknownOutcome(t *testing.T) {
	pg := startPrivatePostgres(t)
	sc := launchSidecar(t, pg.url, t.TempDir(), "--database-timeout", stallTimeout.String())
	sc.waitReplayed(t)
	c := dialClient(t, sc.socket)
	configure(t, c, "nodedup", func(o *protocol.QueueOptions) { o.DedupWindowSeconds = 0 })
	mustPush(t, c, item(t, "nodedup", "p", "first", 0))

	if err := pg.Freeze(); err != nil {
		t.Fatal(err)
	}
	thawed := false
	defer func() {
		if !thawed {
			pg.Thaw() //nolint:errcheck // the test failed; let the cleanup stop it
		}
	}()
	began := time.Now()
	res := pushResults(t, c, item(t, "nodedup", "p", "sent", 1))
	took := time.Since(began)
	r := res[0]
	if r.Status != protocol.StatusFailed || r.Error == nil || r.Error.Code != protocol.CodeUnavailable ||
		!r.Error.Retryable || r.Error.Details["outcomeUnknown"] != true {
		t.Fatalf("a push sent into the stall: %s %+v; want failed unavailable with outcomeUnknown", r.Status, r.Error)
	}
	if took > stallTimeout+2*time.Second {
		t.Fatalf("answered after %v; the bound is %v", took, stallTimeout)
	}
	t.Logf("answered in %v: %s", took.Round(time.Millisecond), r.Error.Message)
	// Once the sidecar knows the database is out of reach, pushes go
	// straight to the spool: nothing of them was sent.
	waitFor(t, 20*time.Second, "the outage to be known", func() bool { return sc.health(t).Spool.Cause == protocol.SpoolCauseTimeout })
	if r := pushResults(t, c, item(t, "nodedup", "p", "later", 2))[0]; r.Status != protocol.StatusBuffered {
		t.Fatalf("a push while the outage is known: %s %v; want buffered", r.Status, r.Error)
	}
	if err := pg.Thaw(); err != nil {
		t.Fatal(err)
	}
	thawed = true
	sc.waitReplayed(t)
	stored := map[string]int{}
	for _, m := range storedMessages(t, pg.pool(t), "nodedup", "p") {
		stored[m.TransactionID]++
	}
	if stored["first"] != 1 || stored["later"] != 1 || stored["sent"] > 1 {
		t.Fatalf("stored %v: want first and later once, sent at most once", stored)
	}
	t.Logf("the push of unknown outcome was stored %d time(s) once the database answered", stored["sent"])
}

// pushResults pushes and returns the results, failing on a call error.
func pushResults(t *testing.T, c *queenside.Client, items ...protocol.PushItem) []protocol.PushResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := c.Push(ctx, items...)
	if err != nil {
		t.Fatalf("push: %v", err)
	}
	return res
}

// Repeated stalls leave no goroutine, file or connection behind: the
// connections that timed out are closed, never reused, and the pool is
// full and serving again after each.
func TestRepeatedStallsLeakNothing(t *testing.T) {
	pg := startPrivatePostgres(t)
	const timeout = 500 * time.Millisecond
	// Profiling answers admin tokens only.
	tokens := filepath.Join(t.TempDir(), "admin-token")
	if err := os.WriteFile(tokens, []byte(testAdminToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sc := launchSidecar(t, pg.url, t.TempDir(), "--database-timeout", timeout.String(), "--pprof", "--admin-token-file", tokens)
	sc.token = testAdminToken
	sc.waitReplayed(t)
	c := dialClient(t, sc.socket)
	hello, err := c.Hello(testContext(t), "test")
	if err != nil {
		t.Fatal(err)
	}
	mustPush(t, c, item(t, "leak", "p", "warm", 0))
	baseGoroutines, baseFiles := sc.goroutines(t), sc.openFiles(t)
	admin := pg.pool(t)
	for round := range 5 {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := range 3 { // pushes, pops and acks in flight as it freezes
			wg.Add(1)
			go func() {
				defer wg.Done()
				dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				cl, err := queenside.Dial(dctx, sc.socket, queenside.WithoutRetry())
				cancel()
				if err != nil {
					t.Error(err)
					return
				}
				defer cl.Close()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					cl.Push(ctx, item(t, "leak", fmt.Sprint("p", w), fmt.Sprintf("r%d-w%d-%d", round, w, i), i)) //nolint:errcheck // any answer will do
					if res, err := cl.Pop(ctx, queenside.PopArgs{Queue: "leak", Batch: 5}); err == nil && len(res.Messages) > 0 {
						cl.AckMessages(ctx, res.Messages...) //nolint:errcheck // any answer will do
					}
					cancel()
				}
			}()
		}
		time.Sleep(300 * time.Millisecond)
		if err := pg.Freeze(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		if err := pg.Thaw(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
		close(stop)
		wg.Wait()
		sc.waitReplayed(t)
	}
	// Connections closed after a timeout finish closing in the background
	// (pgx sends a cancel request, bounded at 15 s): what is left must
	// come back to where it began.
	waitFor(t, 40*time.Second, "goroutines and files back to where they were", func() bool {
		g, f := sc.goroutines(t), sc.openFiles(t)
		if g > baseGoroutines+15 || f > baseFiles+8 {
			t.Logf("%d goroutines (%d before), %d files (%d before)", g, baseGoroutines, f, baseFiles)
			time.Sleep(time.Second)
			return false
		}
		return true
	})
	var conns int
	if err := admin.QueryRow(testContext(t), `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`,
		"queenside/"+hello.SidecarID).Scan(&conns); err != nil {
		t.Fatal(err)
	}
	if conns > 6 {
		t.Fatalf("the sidecar holds %d PostgreSQL connections; --database-connections is 6", conns)
	}
	began := time.Now()
	mustPush(t, c, item(t, "leak", "p", "after", 1))
	t.Logf("after 5 stalls: %d goroutines (%d before), %d files (%d before), %d connections; a push took %v",
		sc.goroutines(t), baseGoroutines, sc.openFiles(t), baseFiles, conns, time.Since(began).Round(time.Millisecond))
}

// goroutines reads the sidecar's goroutine count from its pprof endpoint.
func (p *sidecarProcess) goroutines(t *testing.T) int {
	t.Helper()
	body := p.httpGet(t, "/debug/pprof/goroutine?debug=1")
	m := regexp.MustCompile(`goroutine profile: total (\d+)`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no goroutine count in %.200q", body)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// openFiles counts the sidecar process's open file descriptors.
func (p *sidecarProcess) openFiles(t *testing.T) int {
	t.Helper()
	body := p.httpGet(t, "/metrics")
	m := regexp.MustCompile(`(?m)^process_open_fds (\d+)`).FindStringSubmatch(body)
	if m == nil {
		t.Fatal("no process_open_fds in /metrics")
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// wantMetricAbove asserts that a metric (its name and labels as /metrics
// writes them) is above min.
func (p *sidecarProcess) wantMetricAbove(t *testing.T, metric string, min float64) {
	t.Helper()
	for _, l := range strings.Split(p.httpGet(t, "/metrics"), "\n") {
		if v, ok := strings.CutPrefix(l, metric+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || f <= min {
				t.Fatalf("%s is %s; want above %v", metric, v, min)
			}
			return
		}
	}
	t.Fatalf("/metrics lacks %s", metric)
}
