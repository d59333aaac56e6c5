package groupcommit

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// job is a request of the tests: its keys, and what answered it.
type job struct {
	ctx    context.Context
	name   string
	keys   []string
	weight int
	done   chan string // "batch n", "alone" or "failed: ..."
}

func newJob(name string, keys ...string) *job {
	return &job{ctx: context.Background(), name: name, keys: keys, weight: 1, done: make(chan string, 1)}
}

// recorder is a Config whose Run records its batches, and can be made to
// block or fail.
type recorder struct {
	mu      sync.Mutex
	batches [][]string
	gate    chan struct{}            // when set, Run and Alone wait for it
	gates   map[string]chan struct{} // or for the gate of their first request
	started chan struct{}            // when set, Run and Alone say they started
	fail    error
}

func (r *recorder) wait(first *job) {
	if r.started != nil {
		r.started <- struct{}{}
	}
	if g := r.gates[first.name]; g != nil {
		<-g
	} else if r.gate != nil {
		<-r.gate
	}
}

func (r *recorder) config(workers int, heavy int) Config[*job] {
	return Config[*job]{
		Workers: workers, Depth: 64, MaxItems: 100, MaxHold: time.Second,
		Bound: func(ctx context.Context) (context.Context, context.CancelFunc) {
			return context.WithTimeout(ctx, time.Minute)
		},
		Context: func(j *job) context.Context { return j.ctx },
		Weight:  func(j *job) int { return j.weight },
		Heavy: func(b []*job) bool {
			w := 0
			for _, j := range b {
				w += j.weight
			}
			return w >= heavy
		},
		Keys: func(j *job) []string { return j.keys },
		Run: func(_ context.Context, b []*job) error {
			r.wait(b[0])
			r.mu.Lock()
			var names []string
			for _, j := range b {
				names = append(names, j.name)
			}
			r.batches = append(r.batches, names)
			n := len(r.batches)
			fail := r.fail
			r.mu.Unlock()
			if fail != nil {
				return fail
			}
			for _, j := range b {
				j.done <- "batch " + string(rune('0'+n))
			}
			return nil
		},
		Alone: func(j *job) {
			r.wait(j)
			j.done <- "alone"
		},
		Fail:  func(j *job, err error) { j.done <- "failed: " + err.Error() },
		Retry: func(err error) bool { return !errors.Is(err, errDown) },
	}
}

var errDown = errors.New("down")

func start(t *testing.T, cfg Config[*job]) *Scheduler[*job] {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s := New(cfg)
	s.Start(ctx)
	return s
}

func answer(t *testing.T, j *job) string {
	t.Helper()
	select {
	case a := <-j.done:
		return a
	case <-time.After(5 * time.Second):
		t.Fatalf("%s was never answered", j.name)
		return ""
	}
}

// An idle scheduler runs a request at once, alone; requests that come
// while a batch runs wait for it and then share one batch.
func TestRequestsWaitingTogetherShareABatch(t *testing.T) {
	r := &recorder{gate: make(chan struct{}), started: make(chan struct{}, 4)}
	s := start(t, r.config(2, 100))
	first := newJob("first")
	s.Submit(context.Background(), first) //nolint:errcheck // never refused here
	<-r.started                           // alone, at once
	later := []*job{newJob("a"), newJob("b"), newJob("c")}
	for _, j := range later {
		s.Submit(context.Background(), j) //nolint:errcheck
	}
	time.Sleep(50 * time.Millisecond) // gathered, held while the first runs
	select {
	case <-r.started:
		t.Fatal("a second batch started beside a light one")
	default:
	}
	close(r.gate)
	if a := answer(t, first); a != "alone" {
		t.Fatalf("first: %s", a)
	}
	for _, j := range later {
		if a := answer(t, j); a != "batch 1" {
			t.Fatalf("%s: %s", j.name, a)
		}
	}
	if !slices.Equal(r.batches[0], []string{"a", "b", "c"}) {
		t.Fatalf("batch %v, want a, b, c in order", r.batches[0])
	}
}

// A heavy batch starts beside a running one rather than wait for it.
func TestAHeavyBatchStartsBesideARunningOne(t *testing.T) {
	r := &recorder{gate: make(chan struct{}), started: make(chan struct{}, 4)}
	s := start(t, r.config(2, 5))
	s.Submit(context.Background(), newJob("first")) //nolint:errcheck
	<-r.started
	heavy := newJob("heavy")
	heavy.weight = 5
	s.Submit(context.Background(), heavy) //nolint:errcheck
	select {
	case <-r.started:
	case <-time.After(5 * time.Second):
		t.Fatal("the heavy request waited for the running one")
	}
	close(r.gate)
	answer(t, heavy)
}

// A request naming a key that a running batch holds waits for that batch
// to end; the requests after it do not wait for it.
func TestARequestWaitsForTheBatchHoldingItsKey(t *testing.T) {
	r := &recorder{started: make(chan struct{}, 4), gates: map[string]chan struct{}{
		"first": make(chan struct{}), "free": make(chan struct{}), "clash": make(chan struct{})}}
	s := start(t, r.config(2, 100))
	first := newJob("first", "lease-a", "lease-b")
	s.Submit(context.Background(), first) //nolint:errcheck // never refused here
	<-r.started
	clash, free := newJob("clash", "lease-b"), newJob("free", "lease-c")
	s.Submit(context.Background(), clash) //nolint:errcheck
	s.Submit(context.Background(), free)  //nolint:errcheck
	<-r.started                           // free, once its hold is over
	close(r.gates["free"])
	if a := answer(t, free); a != "alone" {
		t.Fatalf("free: %s", a)
	}
	select {
	case a := <-clash.done:
		t.Fatalf("clash ran while the first held its lease: %s", a)
	case <-r.started:
		t.Fatal("clash started while the first held its lease")
	case <-time.After(200 * time.Millisecond):
	}
	close(r.gates["first"]) // the first ends, freeing lease-b
	answer(t, first)
	<-r.started
	close(r.gates["clash"])
	if a := answer(t, clash); a != "alone" {
		t.Fatalf("clash: %s", a)
	}
}

// A batch that fails is run again request by request, unless Retry says
// the failure is every request's (the database out of reach). A request
// whose context ended is failed, not run.
func TestAFailedBatchIsRunRequestByRequest(t *testing.T) {
	r := &recorder{fail: errors.New("one request's data")}
	s := New(r.config(1, 100))
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	departed := newJob("departed")
	departed.ctx = gone
	batch := []*job{newJob("a"), departed, newJob("b")}
	s.RunBatch(batch)
	for _, j := range batch {
		want := "alone"
		if j == departed {
			want = "failed: context canceled"
		}
		if a := answer(t, j); a != want {
			t.Fatalf("%s: %s, want %s", j.name, a, want)
		}
	}
	r.fail = errDown
	batch = []*job{newJob("c"), newJob("d")}
	s.RunBatch(batch)
	for _, j := range batch {
		if a := answer(t, j); a != "failed: down" {
			t.Fatalf("%s: %s", j.name, a)
		}
	}
}

// A request its caller withdrew before a batch took it is left out of the
// batch and answered by no one; the others of the batch run.
func TestWithdrawnRequestIsNotRun(t *testing.T) {
	r := &recorder{gate: make(chan struct{}), started: make(chan struct{}, 4)}
	cfg := r.config(1, 100)
	withdrawn := map[string]bool{"b": true}
	cfg.Claim = func(j *job) bool { return !withdrawn[j.name] }
	s := start(t, cfg)
	first := newJob("first")
	s.Submit(context.Background(), first) //nolint:errcheck // never refused here
	<-r.started
	later := []*job{newJob("a"), newJob("b"), newJob("c")}
	for _, j := range later {
		s.Submit(context.Background(), j) //nolint:errcheck
	}
	time.Sleep(50 * time.Millisecond)
	close(r.gate)
	answer(t, first)
	if a, c := answer(t, later[0]), answer(t, later[2]); a != "batch 1" || c != "batch 1" {
		t.Fatalf("a: %s, c: %s", a, c)
	}
	if !slices.Equal(r.batches[0], []string{"a", "c"}) {
		t.Fatalf("batch %v: want the withdrawn request left out", r.batches[0])
	}
	select {
	case a := <-later[1].done:
		t.Fatalf("the withdrawn request was answered %q", a)
	default:
	}
}

// Requests of different lanes never share a batch; each lane's requests
// keep their order.
func TestRequestsOfDifferentLanesNeverShareABatch(t *testing.T) {
	r := &recorder{gate: make(chan struct{}), started: make(chan struct{}, 8)}
	cfg := r.config(2, 100)
	lanes := map[string]string{"first": "x", "a": "x", "b": "y", "c": "x", "d": "y"}
	cfg.Lane = func(j *job) string { return lanes[j.name] }
	s := start(t, cfg)
	first := newJob("first")
	s.Submit(context.Background(), first) //nolint:errcheck // never refused here
	<-r.started
	later := []*job{newJob("a"), newJob("b"), newJob("c"), newJob("d")}
	for _, j := range later {
		s.Submit(context.Background(), j) //nolint:errcheck
	}
	time.Sleep(50 * time.Millisecond) // gathered, held while the first runs
	close(r.gate)
	answer(t, first)
	for _, j := range later {
		if a := answer(t, j); !strings.HasPrefix(a, "batch ") {
			t.Fatalf("%s: %s, want a shared batch", j.name, a)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	got := map[string][]string{}
	for _, b := range r.batches {
		for _, name := range b {
			if lanes[name] != lanes[b[0]] {
				t.Fatalf("batch %v mixes lanes", b)
			}
		}
		got[lanes[b[0]]] = append(got[lanes[b[0]]], b...)
	}
	if !slices.Equal(got["x"], []string{"a", "c"}) || !slices.Equal(got["y"], []string{"b", "d"}) {
		t.Fatalf("batches %v; want a, c and b, d, each in order", r.batches)
	}
}
