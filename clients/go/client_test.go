package queenside_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar"
	"github.com/queenside/queenside/sidecar/pgtest"
	"github.com/queenside/queenside/sidecar/store"
)

func TestMain(m *testing.M) {
	if settings := os.Getenv(inboxChildEnv); settings != "" {
		os.Exit(inboxConsumer(settings)) // the inbox test's consumer
	}
	pgtest.Main(m)
}

func socketPath(t *testing.T) string {
	dir, err := os.MkdirTemp("", "qsc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "s.sock")
}

// startSidecar serves a real sidecar on a fresh database.
func startSidecar(t *testing.T) string {
	t.Helper()
	return startSidecarWith(t, sidecar.Options{})
}

// startSidecarWith is startSidecar with the server's options.
func startSidecarWith(t *testing.T, opts sidecar.Options) string {
	t.Helper()
	return serveOn(t, pgtest.NewDatabase(t), opts)
}

// serveOn serves a real sidecar on the database at dbURL.
func serveOn(t *testing.T, dbURL string, opts sidecar.Options) string {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, dbURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	path := socketPath(t)
	ln, err := sidecar.ListenSocket(path, 0o660)
	if err != nil {
		t.Fatal(err)
	}
	srv := sidecar.New(st, opts)
	srv.SetReady()
	go srv.Serve(ln) //nolint:errcheck
	t.Cleanup(func() { srv.Close(); st.Close() })
	return path
}

func dial(t *testing.T, path string) *queenside.Client {
	t.Helper()
	c, err := queenside.Dial(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestManyGoroutinesShareOneConnection(t *testing.T) {
	c := dial(t, startSidecar(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				it, err := queenside.Item("q", g*100+i)
				if err != nil {
					t.Error(err)
					return
				}
				it.Partition = fmt.Sprintf("p%d", g%4)
				it.TransactionID = fmt.Sprintf("g%d-%d", g, i)
				res, err := c.Push(ctx, it)
				if err != nil {
					t.Error(err)
					return
				}
				// Each caller gets the answer to its own request.
				if res[0].TransactionID != it.TransactionID || res[0].Status != protocol.StatusQueued {
					t.Errorf("got %+v for %s", res[0], it.TransactionID)
					return
				}
			}
		}()
	}
	wg.Wait()
	st, err := c.Stats(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, p := range st.Partitions {
		total += p.HeadOffset
	}
	if total != 640 {
		t.Fatalf("%d messages stored, want 640", total)
	}
}

func TestConfigureQueuesAndHealth(t *testing.T) {
	c := dial(t, startSidecar(t))
	ctx := context.Background()
	opts := queenside.DefaultQueueOptions()
	opts.LeaseSeconds, opts.RetryLimit = 5, 7
	got, err := c.Configure(ctx, "jobs", opts)
	if err != nil || got != opts {
		t.Fatalf("configure: %+v, %v", got, err)
	}
	qs, err := c.Queues(ctx)
	if err != nil || len(qs) != 1 || qs[0].Queue != "jobs" || qs[0].Options != opts || qs[0].Partitions != 0 {
		t.Fatalf("queues: %+v, %v", qs, err)
	}
	h, err := c.Health(ctx)
	if err != nil || h.Status != protocol.HealthOK {
		t.Fatalf("health: %+v, %v", h, err)
	}
}

// fakeServer answers the requests it reads in reverse order, to prove the
// client routes responses by id rather than by arrival.
func fakeServer(t *testing.T, requests int, answer func(protocol.Request) protocol.Response) string {
	path := socketPath(t)
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		var reqs []protocol.Request
		for len(reqs) < requests {
			body, err := protocol.ReadFrame(nc, nil, 1<<20)
			if err != nil {
				return
			}
			req, perr := protocol.DecodeRequest(body)
			if perr != nil {
				return
			}
			reqs = append(reqs, req)
		}
		for i := len(reqs) - 1; i >= 0; i-- {
			body, _ := protocol.Marshal(answer(reqs[i]))
			protocol.WriteFrame(nc, body) //nolint:errcheck
		}
		time.Sleep(time.Second)
	}()
	return path
}

func TestResponsesOutOfOrderReachTheirCallers(t *testing.T) {
	path := fakeServer(t, 3, func(r protocol.Request) protocol.Response {
		res, _ := protocol.Marshal(map[string]any{"queue": fmt.Sprint(r.ID), "partitions": []any{}})
		return protocol.Response{ID: r.ID, Result: res}
	})
	c := dial(t, path)
	var wg sync.WaitGroup
	ids := make([]string, 3)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var res protocol.StatsResult
			if err := c.Call(context.Background(), protocol.OpStats, protocol.QueueArgs{Queue: "q"}, &res); err != nil {
				t.Error(err)
			}
			ids[i] = res.Queue
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, id := range ids {
		seen[id] = true
	}
	if len(seen) != 3 {
		t.Fatalf("callers got answers %v; each should get its own", ids)
	}
}

func TestErrorsCarryCodeAndRetryable(t *testing.T) {
	path := fakeServer(t, 1, func(r protocol.Request) protocol.Response {
		return protocol.Response{ID: r.ID, Error: protocol.Errorf(protocol.CodeUnavailable, "down")}
	})
	// Without retries: health answered unavailable would be sent again
	// (retry_test.go), and this server answers one request only.
	c, err := queenside.Dial(context.Background(), path, queenside.WithoutRetry())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Health(context.Background())
	var qe *queenside.Error
	if !errors.As(err, &qe) || qe.Code != protocol.CodeUnavailable || !qe.Retryable {
		t.Fatalf("error %v, want a retryable unavailable", err)
	}
}

func TestContextEndsAWaitingCall(t *testing.T) {
	path := fakeServer(t, 99, nil) // never answers
	c := dial(t, path)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.Health(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want the context's deadline", err)
	}
}

func TestCallsFailAfterClose(t *testing.T) {
	c := dial(t, startSidecar(t))
	c.Close()
	if _, err := c.Health(context.Background()); !errors.Is(err, queenside.ErrClosed) {
		t.Fatalf("got %v, want ErrClosed", err)
	}
}
