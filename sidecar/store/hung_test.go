package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/queenside/queenside/sidecar/citustest"
)

// A Citus worker frozen (SIGSTOP) under pushes to every partition at once:
// a push to a partition on the other worker commits as before, never
// sharing a transaction with one to the frozen worker (group commit lanes);
// a push to the frozen worker times out once, and after that the pushes
// to any of its partitions are refused at once, not sent, rather than
// each hold a connection for the timeout. Once the worker is thawed, a
// push to it is let through at the end of the refusal's hold, and when it
// commits the others are no longer refused.
func TestAHungWorkerHoldsUpOnlyPushesToIt(t *testing.T) {
	cluster := citustest.Start(t, 2)
	ctx := context.Background()
	if err := cluster.Migrate(ctx, citustest.Database, 4); err != nil {
		t.Fatal(err)
	}
	const timeout = time.Second
	s, err := OpenWith(ctx, Options{URL: cluster.URL(), Timeout: timeout}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const parts = 8
	var names []string
	for p := range parts {
		names = append(names, fmt.Sprint("p", p))
		if _, err := s.Push(ctx, messages(names[p], "warm", 1)); err != nil {
			t.Fatal(err)
		}
	}
	frozen := cluster.Workers[0]
	onFrozen, err := citustest.PartitionsOn(ctx, cluster.Connect(t), "q", frozen)
	if err != nil {
		t.Fatal(err)
	}
	if len(onFrozen) == 0 || len(onFrozen) == parts {
		t.Fatalf("partitions on the worker to freeze: %v; want some of the %d, not all", onFrozen, parts)
	}

	type result struct {
		err  error
		took time.Duration
	}
	// pushAll pushes one message to every partition at once, each push
	// bounded by the timeout.
	pushAll := func(round string) map[string]result {
		var mu sync.Mutex
		out := map[string]result{}
		var wg sync.WaitGroup
		start := make(chan struct{})
		for _, name := range names {
			wg.Go(func() {
				<-start
				bctx, cancel := s.Bound(ctx)
				defer cancel()
				began := time.Now()
				_, err := s.Push(bctx, messages(name, round, 1))
				mu.Lock()
				out[name] = result{TimedOut(bctx, err), time.Since(began)}
				mu.Unlock()
			})
		}
		close(start)
		wg.Wait()
		return out
	}
	if err := frozen.Freeze(); err != nil {
		t.Fatal(err)
	}
	thawed := false
	defer func() {
		if !thawed {
			frozen.Thaw() //nolint:errcheck // the test failed; the cleanup stops it
		}
	}()
	for _, round := range []string{"first", "second"} {
		for name, r := range pushAll(round) {
			switch {
			case !onFrozen[name] && r.err != nil:
				t.Fatalf("%s push to %s, on the worker that answers: %v after %v", round, name, r.err, r.took)
			case onFrozen[name] && AsTimeout(r.err) == nil:
				t.Fatalf("%s push to %s, on the frozen worker: %v; want a timeout", round, name, r.err)
			case onFrozen[name] && round == "second" && (!errors.Is(r.err, ErrNotSent) || r.took > timeout/5):
				t.Fatalf("second push to %s, on the frozen worker: %v after %v; want refused at once, not sent", name, r.err, r.took)
			}
		}
	}
	if err := frozen.Thaw(); err != nil {
		t.Fatal(err)
	}
	thawed = true
	// Within the refusal's hold a push is refused still; then one is let
	// through, and once it commits none is.
	var probe string
	for name := range onFrozen {
		probe = name
	}
	deadline := time.Now().Add(3 * timeout)
	for k := 0; ; k++ {
		bctx, cancel := s.Bound(ctx)
		_, err := s.Push(bctx, messages(probe, fmt.Sprint("probe-", k), 1))
		cancel()
		if err == nil {
			break
		}
		if !errors.Is(err, ErrNotSent) || time.Now().After(deadline) {
			t.Fatalf("a push to %s after the thaw: %v", probe, err)
		}
		time.Sleep(timeout / 10)
	}
	for name, r := range pushAll("third") {
		if r.err != nil {
			t.Fatalf("push to %s after the thaw: %v", name, r.err)
		}
	}
}
