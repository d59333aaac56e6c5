package sidecar

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/pgserver"
)

// A hundred sidecar processes on one PostgreSQL at its default
// max_connections of 100, through PgBouncer in transaction mode: each
// pushes and consumes, long-polls are woken across sidecars, and no app
// ever sees "too many clients". Ten sidecars keep a listener; the other
// ninety run without one (--listen-database-url none) and find other
// sidecars' pushes by looking every second. Two run the janitor.
func TestAHundredSidecarsOnOneDatabase(t *testing.T) {
	const sidecarCount, listening, janitors, perSidecar = 100, 10, 2, 20
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pg, err := pgserver.Start(ctx, pgserver.Options{Dir: t.TempDir(), Settings: []string{"max_connections=100"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Stop("immediate") }) //nolint:errcheck // best effort
	direct := pg.URL("postgres") + "&connect_timeout=5"
	bouncer := startPgBouncer(t, direct, 20)

	// The most client connections PostgreSQL held, sampled throughout.
	var most atomic.Int64
	sampling, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		conn, err := pgx.Connect(sampling, direct)
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close(context.Background())
		for sampling.Err() == nil {
			var n int64
			if err := conn.QueryRow(sampling, "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'").Scan(&n); err == nil && n > most.Load() {
				most.Store(n)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()

	began := time.Now()
	sidecars := make([]*sidecarProcess, sidecarCount)
	for i := range sidecars {
		extra := []string{"--session-database-url", direct}
		if i >= listening {
			extra = append(extra, "--listen-database-url", "none")
		}
		if i >= janitors {
			extra = append(extra, "--retention-interval", "0")
		}
		sidecars[i] = launchSidecar(t, bouncer, t.TempDir(), extra...)
	}
	// A sidecar answers its socket before it has checked the schema, and
	// spools what is pushed meanwhile: the pushes below want it ready.
	for _, sc := range sidecars {
		waitFor(t, 30*time.Second, "the sidecar to be ready", func() bool { return healthy(sc.socket) })
	}
	t.Logf("%d sidecars started and ready in %.1f s", sidecarCount, time.Since(began).Seconds())
	clients := make([]*queenside.Client, sidecarCount)
	for i, sc := range sidecars {
		clients[i] = dialClient(t, sc.socket)
	}
	each := func(f func(i int, c *queenside.Client) error) {
		var wg sync.WaitGroup
		for i, c := range clients {
			wg.Go(func() {
				if err := f(i, c); err != nil {
					t.Errorf("sidecar %d: %v", i, err)
				}
			})
		}
		wg.Wait()
	}

	// Every sidecar pushes to a partition of its own, and the next one
	// consumes it.
	each(func(i int, c *queenside.Client) error {
		items := make([]protocol.PushItem, perSidecar)
		for k := range items {
			items[k] = item(t, "h", fmt.Sprintf("p%d", i), fmt.Sprintf("h-%d-%d", i, k), k)
		}
		res, err := c.Push(ctx, items...)
		if err == nil && res[0].Status != protocol.StatusQueued {
			err = fmt.Errorf("push answered %s %v", res[0].Status, res[0].Error)
		}
		return err
	})
	each(func(i int, c *queenside.Client) error {
		p := fmt.Sprintf("p%d", (i+sidecarCount-1)%sidecarCount)
		res, err := c.Pop(ctx, protocol.PopArgs{Queue: "h", Partition: p, Group: "g", Batch: 100, AutoAck: true})
		if err != nil {
			return err
		}
		if len(res.Messages) != perSidecar {
			return fmt.Errorf("%s: %d messages, want %d", p, len(res.Messages), perSidecar)
		}
		for k, m := range res.Messages {
			if m.Offset != int64(k) {
				return fmt.Errorf("%s: offset %d at %d", p, m.Offset, k)
			}
		}
		return nil
	})

	// Long-polls woken across sidecars: a push through a sidecar without a
	// listener wakes one waiting on a sidecar with one (its NOTIFY), and
	// one waiting on a sidecar without (its next look).
	waiters := []int{0, 5, 50, 99}
	woken := make(chan string, len(waiters))
	for _, w := range waiters {
		go func() {
			start := time.Now()
			res, err := clients[w].Pop(ctx, protocol.PopArgs{Queue: "lp", Partition: fmt.Sprintf("w%d", w), Group: "g", WaitMs: 20000, AutoAck: true})
			switch {
			case err != nil:
				woken <- fmt.Sprintf("sidecar %d: %v", w, err)
			case len(res.Messages) != 1:
				woken <- fmt.Sprintf("sidecar %d: woken with %d messages", w, len(res.Messages))
			default:
				t.Logf("sidecar %d (listener %v): woken %.2f s after it began waiting", w, w < listening, time.Since(start).Seconds())
				woken <- ""
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	for _, w := range waiters {
		mustPush(t, clients[(w+30)%sidecarCount], item(t, "lp", fmt.Sprintf("w%d", w), "", "x"))
	}
	for range waiters {
		if msg := <-woken; msg != "" {
			t.Error(msg)
		}
	}

	// Throughput: pushes of 100 through one sidecar from 4 connections,
	// against the same through all of them at once.
	one := timedPushes(t, func(k int) *queenside.Client { return clients[k%4] }, 4, 50)
	all := timedPushes(t, func(k int) *queenside.Client { return clients[k] }, sidecarCount, 2)
	t.Logf("pushes of 100 messages: %.0f msg/s through one sidecar (4 connections), %.0f msg/s through %d sidecars at once", one, all, sidecarCount)

	// At rest: each sidecar's memory and CPU.
	time.Sleep(time.Second)
	cpu0 := make([]float64, sidecarCount)
	for i, sc := range sidecars {
		cpu0[i] = cpuSeconds(t, sc.cmd.Process.Pid)
	}
	const idle = 10 * time.Second
	time.Sleep(idle)
	var rssSum, rssMost, cpuSum, cpuMost float64
	for i, sc := range sidecars {
		rss := rssMB(t, sc.cmd.Process.Pid)
		cpu := (cpuSeconds(t, sc.cmd.Process.Pid) - cpu0[i]) / idle.Seconds() * 100
		rssSum, rssMost, cpuSum, cpuMost = rssSum+rss, max(rssMost, rss), cpuSum+cpu, max(cpuMost, cpu)
	}
	stopSampling()
	<-sampled
	t.Logf("idle over %v: sidecar RSS %.1f MB on average, %.1f at most; CPU %.2f%% of a core on average, %.2f%% at most",
		idle, rssSum/sidecarCount, rssMost, cpuSum/sidecarCount, cpuMost)
	t.Logf("PostgreSQL client connections: %d at most, of max_connections 100", most.Load())
	if most.Load() > 97 {
		t.Errorf("%d client connections: past what max_connections leaves", most.Load())
	}
	for i, sc := range sidecars {
		if strings.Contains(sc.logText(), "too many clients") {
			t.Errorf("sidecar %d met too many clients:\n%s", i, sc.logText())
		}
	}
}

// timedPushes runs pushes of 100 messages from workers, rounds each, and
// returns messages a second.
func timedPushes(t *testing.T, client func(worker int) *queenside.Client, workers, rounds int) float64 {
	t.Helper()
	var wg sync.WaitGroup
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			c := client(w)
			for r := range rounds {
				items := make([]protocol.PushItem, 100)
				for k := range items {
					items[k] = item(t, "tp", fmt.Sprintf("t%d", (w*rounds+r)%10), "", k)
				}
				if _, err := c.Push(context.Background(), items...); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return float64(workers*rounds*100) / time.Since(start).Seconds()
}

// cpuSeconds is a process's user and system CPU from /proc.
func cpuSeconds(t *testing.T, pid int) float64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100 // USER_HZ
}

// rssMB is a process's resident memory from /proc.
func rssMB(t *testing.T, pid int) float64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}
