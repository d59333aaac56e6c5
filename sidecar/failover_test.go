package sidecar

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/pgserver"
)

// A failover to a standby, as a PostgreSQL run with a synchronous standby
// does it: the primary dies (pg_ctl stop -m immediate), the standby is
// promoted, and the sidecars, given both servers in one multi-host URL with
// target_session_attrs=read-write, follow the new primary. Then back: the
// old primary is rewound (pg_rewind) to follow the new one, made its
// synchronous standby, and promoted when the new one dies in turn.

const (
	failoverParts = 8
	failoverBatch = 50
)

// makeSynchronous has primary wait for a standby's flush at every commit.
func makeSynchronous(t *testing.T, primary *pgserver.Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := primary.RequireSynchronousStandby(ctx); err != nil {
		t.Fatal(err)
	}
}

// promote makes standby the primary.
func promote(t *testing.T, standby *pgserver.Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
}

// multiHostURL names both servers, the writable one to be used.
func multiHostURL(servers ...*pgserver.Server) string {
	var hosts, ports []string
	for _, s := range servers {
		hosts = append(hosts, s.SocketDir())
		ports = append(ports, "5432")
	}
	q := url.Values{}
	q.Set("host", strings.Join(hosts, ","))
	q.Set("port", strings.Join(ports, ","))
	q.Set("target_session_attrs", "read-write")
	q.Set("connect_timeout", "2")
	q.Set("sslmode", "disable")
	return "postgres://postgres@/postgres?" + q.Encode()
}

// failoverProducer pushes numbered items to its queue through one sidecar,
// batch after batch, and notes when pushes were answered buffered.
type failoverProducer struct {
	queue    string
	c        *queenside.Client
	mu       sync.Mutex
	pushed   int
	buffered int
	spooled  []time.Time // when pushes were answered buffered
}

func (p *failoverProducer) push(t *testing.T, batches int) {
	for range batches {
		p.mu.Lock()
		from := p.pushed
		p.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		res, err := p.c.Push(ctx, numbered(t, p.queue, from, failoverBatch, failoverParts)...)
		cancel()
		if err != nil {
			t.Errorf("push %s from %d: %v", p.queue, from, err)
			return
		}
		now := time.Now()
		buffered := 0
		for _, r := range res {
			switch r.Status {
			case protocol.StatusBuffered:
				buffered++
			case protocol.StatusQueued:
			default:
				t.Errorf("push %s item %d: %s %v; want queued or buffered", p.queue, from+r.Index, r.Status, r.Error)
				return
			}
		}
		p.mu.Lock()
		p.pushed += len(res)
		p.buffered += buffered
		if buffered > 0 {
			p.spooled = append(p.spooled, now)
		}
		p.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
}

// failoverConsumer pops and acks one queue through one sidecar and checks
// what it receives: each partition's first deliveries in offset order, a
// message delivered again only flagged redelivered, and none after its ack
// succeeded.
type failoverConsumer struct {
	queue  string
	c      *queenside.Client
	mu     sync.Mutex
	first  map[string]bool // transaction ids received
	acked  map[string]bool
	next   map[string]int64 // per partition, the offset a first delivery must exceed
	failed []time.Time      // when pops failed (unavailable)
	errs   []string
}

func newFailoverConsumer(queue string, c *queenside.Client) *failoverConsumer {
	return &failoverConsumer{queue: queue, c: c, first: map[string]bool{}, acked: map[string]bool{}, next: map[string]int64{}}
}

// traffic is producers pushing numbered items through sidecars and
// consumers checking what they receive.
type traffic struct {
	t         *testing.T
	producers []*failoverProducer
	consumers []*failoverConsumer // consumers[i] reads producers[i]'s queue
	stop      chan struct{}
	consuming sync.WaitGroup
}

// startTraffic runs a producer through each sidecar, its queue consumed
// through the next one.
func startTraffic(t *testing.T, prefix string, sidecars []*sidecarProcess) *traffic {
	tr := &traffic{t: t, stop: make(chan struct{})}
	for i, sc := range sidecars {
		tr.add(fmt.Sprintf("%s%d", prefix, i), sc, sidecars[(i+1)%len(sidecars)])
	}
	return tr
}

// add runs one more producer, through from, and its consumer, through to.
func (tr *traffic) add(queue string, from, to *sidecarProcess) {
	tr.producers = append(tr.producers, &failoverProducer{queue: queue, c: dialClient(tr.t, from.socket)})
	c := newFailoverConsumer(queue, dialClient(tr.t, to.socket))
	tr.consumers = append(tr.consumers, c)
	tr.consuming.Go(func() { c.run(tr.stop) })
}

// push has every producer push batches, and returns when all have.
func (tr *traffic) push(batches int) {
	var wg sync.WaitGroup
	for _, p := range tr.producers {
		wg.Go(func() { p.push(tr.t, batches) })
	}
	wg.Wait()
}

// finish waits until every message pushed is delivered, stops the
// consumers, and checks that each was stored and delivered once, in order.
func (tr *traffic) finish(pool *pgxpool.Pool) {
	t := tr.t
	waitFor(t, 60*time.Second, "every message to be delivered", func() bool {
		for i, c := range tr.consumers {
			c.mu.Lock()
			n := len(c.first)
			c.mu.Unlock()
			if n < tr.producers[i].pushed {
				return false
			}
		}
		return true
	})
	close(tr.stop)
	tr.consuming.Wait()
	for i, p := range tr.producers {
		checkStoredOnceInOrder(t, pool, p.queue, p.pushed, failoverParts, nil)
		if c := tr.consumers[i]; len(c.errs) > 0 || len(c.first) != p.pushed {
			t.Fatalf("%s: %d of %d delivered, errors: %v", p.queue, len(c.first), p.pushed, c.errs)
		}
	}
}

// use moves the consumer to another connection (its sidecar is about to
// stop, say).
func (c *failoverConsumer) use(client *queenside.Client) {
	c.mu.Lock()
	c.c = client
	c.mu.Unlock()
}

// run consumes until stop.
func (c *failoverConsumer) run(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		c.mu.Lock()
		client := c.c
		c.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		res, err := client.Pop(ctx, protocol.PopArgs{Queue: c.queue, Group: "g", Batch: 100, Partitions: 4, WaitMs: 200, LeaseSeconds: 5})
		cancel()
		if err != nil {
			c.mu.Lock()
			c.failed = append(c.failed, time.Now())
			c.mu.Unlock()
			time.Sleep(100 * time.Millisecond)
			continue
		}
		c.receive(res.Messages)
		if len(res.Messages) == 0 {
			continue
		}
		ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
		ar, err := client.Ack(ctx, completedAll(res)...)
		cancel()
		if err != nil {
			continue // not acked: the leases lapse and the messages come again, flagged
		}
		c.mu.Lock()
		for _, r := range ar.Results {
			if r.Success {
				c.acked[res.Messages[r.Index].TransactionID] = true
			}
		}
		c.mu.Unlock()
	}
}

func (c *failoverConsumer) receive(msgs []protocol.Message) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range msgs {
		switch {
		case c.acked[m.TransactionID]:
			c.errs = append(c.errs, fmt.Sprintf("%s came back after its ack succeeded", m.TransactionID))
		case c.first[m.TransactionID]:
			if !m.Redelivered {
				c.errs = append(c.errs, fmt.Sprintf("%s delivered again, not flagged redelivered", m.TransactionID))
			}
		default:
			c.first[m.TransactionID] = true
			if next, seen := c.next[m.Partition]; seen && m.Offset < next {
				c.errs = append(c.errs, fmt.Sprintf("%s: offset %d first delivered after %d", m.Partition, m.Offset, next-1))
			}
			c.next[m.Partition] = m.Offset + 1
		}
	}
}

func TestFailoverToASynchronousStandbyAndBack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	dir := t.TempDir()
	// pg_rewind needs hint bits logged on the server it rewinds, and its WAL
	// back to the last checkpoint before the two diverged.
	settings := []string{"wal_log_hints=on", "wal_keep_size=256MB"}
	a, err := pgserver.Start(ctx, pgserver.Options{Dir: filepath.Join(dir, "a"), Settings: settings})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Stop("immediate") }) //nolint:errcheck // best effort
	b, err := pgserver.StartStandby(ctx, a, pgserver.Options{Dir: filepath.Join(dir, "b"), Settings: settings})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Stop("immediate") }) //nolint:errcheck // best effort
	makeSynchronous(t, a)

	dbURL := multiHostURL(a, b)
	sidecars := []*sidecarProcess{launchSidecar(t, dbURL, t.TempDir()), launchSidecar(t, dbURL, t.TempDir())}
	for _, sc := range sidecars {
		sc.waitReplayed(t)
	}
	tr := startTraffic(t, "fo", sidecars)
	// failover stops from with traffic flowing, promotes to, and returns
	// when the stop began and, from sidecar 0's health, how long the
	// database was unavailable to it.
	type gap struct {
		stopped          time.Time
		unhealthy, ready time.Duration // health 503 from, and 200 again at, after stopped
	}
	failover := func(from, to *pgserver.Server) gap {
		var wg sync.WaitGroup
		wg.Go(func() { tr.push(40) })
		time.Sleep(300 * time.Millisecond) // with pushes and pops in flight
		g := gap{stopped: time.Now()}
		sampled := make(chan struct{})
		sawUnhealthy := make(chan struct{})
		promoted := make(chan struct{})
		go func() {
			defer close(sampled)
			for {
				ok := healthy(sidecars[0].socket)
				since := time.Since(g.stopped)
				if !ok && g.unhealthy == 0 {
					g.unhealthy = since
					close(sawUnhealthy)
				}
				select {
				case <-promoted:
					if ok {
						g.ready = since
						return
					}
				default:
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
		if err := from.Stop("immediate"); err != nil {
			t.Fatal(err)
		}
		// Like a failover manager, which takes seconds to decide, promote
		// only once the outage shows: promoted at once, the standby can
		// shorten it below one sample of the health (on a loaded machine a
		// single probe took the whole outage and answered from the new
		// primary).
		select {
		case <-sawUnhealthy:
		case <-time.After(5 * time.Second):
		}
		promote(t, to)
		close(promoted)
		<-sampled
		wg.Wait()
		return g
	}

	tr.push(10)
	gaps := []gap{failover(a, b)}
	tr.push(10)
	for _, sc := range sidecars {
		if h := sc.health(t); h.Status != protocol.HealthOK {
			t.Fatalf("after the failover to b: %+v", h)
		}
	}

	// Back: a follows b, as its synchronous standby, and then replaces it.
	if err := a.Rejoin(ctx, b); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			log, _ := os.ReadFile(a.LogFile())
			t.Logf("a's log:\n%s", log[max(0, len(log)-3000):])
		}
	})
	makeSynchronous(t, b)
	tr.push(10)
	gaps = append(gaps, failover(b, a))
	tr.push(10)

	for k, g := range gaps {
		if g.unhealthy == 0 {
			t.Errorf("failover %d: health never answered 503", k+1)
		}
		t.Logf("failover %d: health 503 from %.2f s to %.2f s after the primary stopped", k+1, g.unhealthy.Seconds(), g.ready.Seconds())
	}
	for _, sc := range sidecars {
		sc.waitReplayed(t)
	}
	// Each sidecar's listener followed the primary: a long-poll on one is
	// woken by a push through the other.
	pool := (&privatePostgres{Server: a, url: a.URL("postgres")}).pool(t)
	waitFor(t, 10*time.Second, "both listeners on the new primary", func() bool {
		var n int
		err := pool.QueryRow(context.Background(), "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'queenside%' AND query LIKE 'LISTEN%'").Scan(&n)
		return err == nil && n == 2
	})
	woken := make(chan int, 1)
	waiter := dialClient(t, sidecars[1].socket)
	go func() {
		res, err := waiter.Pop(context.Background(), protocol.PopArgs{Queue: "after", Group: "g", WaitMs: 20000, AutoAck: true})
		if err != nil {
			t.Error(err)
		}
		woken <- len(res.Messages)
	}()
	time.Sleep(200 * time.Millisecond)
	mustPush(t, dialClient(t, sidecars[0].socket), item(t, "after", "p", "", "x"))
	if n := <-woken; n != 1 {
		t.Fatalf("the long-poll after the failovers got %d messages", n)
	}
	tr.finish(pool)
	for i, p := range tr.producers {
		c := tr.consumers[i]
		for k, g := range gaps {
			next := time.Now()
			if k+1 < len(gaps) {
				next = gaps[k+1].stopped
			}
			spooled := within(p.spooled, g.stopped, next)
			failed := within(c.failed, g.stopped, next)
			if len(spooled) == 0 {
				t.Errorf("%s: no push was answered buffered in failover %d", p.queue, k+1)
				continue
			}
			t.Logf("%s, failover %d: pushes answered buffered from %.2f to %.2f s after the primary stopped; pops failed (unavailable) %s",
				p.queue, k+1, spooled[0].Sub(g.stopped).Seconds(), spooled[len(spooled)-1].Sub(g.stopped).Seconds(), span(failed, g.stopped))
		}
		t.Logf("%s: %d pushed (%d buffered), all stored and delivered once, in order", p.queue, p.pushed, p.buffered)
	}
}

// within is the times in [from, to).
func within(times []time.Time, from, to time.Time) []time.Time {
	var out []time.Time
	for _, x := range times {
		if !x.Before(from) && x.Before(to) {
			out = append(out, x)
		}
	}
	return out
}

func span(times []time.Time, since time.Time) string {
	if len(times) == 0 {
		return "never"
	}
	return fmt.Sprintf("from %.2f to %.2f s", times[0].Sub(since).Seconds(), times[len(times)-1].Sub(since).Seconds())
}

// healthy asks a sidecar's health over its socket: is the database there?
func healthy(socket string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := queenside.Dial(ctx, socket)
	if err != nil {
		return false
	}
	defer c.Close()
	h, err := c.Health(ctx)
	return err == nil && h.Status == protocol.HealthOK
}
