package history

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"runtime"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func at(k int) time.Time { return t0.Add(time.Duration(k) * DefaultInterval) }

// manyQueues is a sample of n queues of g groups each, queue i having
// pushed i and its groups lag i*100+j; sample k popped 2k.
func manyQueues(k, n, g int) Sample {
	s := Sample{At: at(k), Pushed: float64(k), Consumed: math.NaN(), Popped: float64(2 * k), DatabaseLatencyMs: 1.5, SpoolRecords: math.NaN()}
	for i := range n {
		q := Queue{Name: fmt.Sprintf("q-%04d", i), Pushed: float64(i), Consumed: float64(k)}
		for j := range g {
			q.Groups = append(q.Groups, Group{Name: fmt.Sprintf("g-%02d", j), Lag: float64(i*100 + j)})
		}
		s.Queues = append(s.Queues, q)
	}
	return s
}

func TestHistoryKeepsTheLastCapacitySamplesOldestFirst(t *testing.T) {
	h := New(DefaultInterval)
	if s := h.Snapshot(""); len(s.At) != 0 || len(s.Pushed) != 0 || s.Queue != nil {
		t.Fatalf("empty history: %+v", s)
	}
	for k := range 5 {
		h.Record(manyQueues(k, 1, 1))
	}
	s := h.Snapshot("q-0000")
	if len(s.At) != 5 || !s.At[0].Equal(at(0)) || !s.At[4].Equal(at(4)) || s.Pushed[4] != 4 {
		t.Fatalf("5 samples: %v %v", s.At, s.Pushed)
	}
	// Past the capacity the oldest go, and the order stays oldest first.
	for k := 5; k < Capacity+37; k++ {
		h.Record(manyQueues(k, 1, 1))
	}
	s = h.Snapshot("q-0000")
	if len(s.At) != Capacity || len(s.Pushed) != Capacity || len(s.Queue.Consumed) != Capacity {
		t.Fatalf("full: %d times, %d values", len(s.At), len(s.Pushed))
	}
	for k := range Capacity {
		want := 37 + k
		if !s.At[k].Equal(at(want)) || s.Pushed[k] != float64(want) || s.Popped[k] != float64(2*want) || s.Queue.Consumed[k] != float64(want) {
			t.Fatalf("value %d: at %v pushed %v popped %v consumed %v; want sample %d", k, s.At[k], s.Pushed[k], s.Popped[k], s.Queue.Consumed[k], want)
		}
	}
	if s.IntervalMs != 5000 || s.Capacity != Capacity {
		t.Fatalf("interval %d, capacity %d", s.IntervalMs, s.Capacity)
	}
}

func TestHistoryKeepsAtMostMaxQueuesAndMaxGroups(t *testing.T) {
	h := New(DefaultInterval)
	h.Record(manyQueues(0, 1000, 25))
	if len(h.queues) != MaxQueues {
		t.Fatalf("%d queues kept, want %d", len(h.queues), MaxQueues)
	}
	// The first ones listed are kept.
	s := h.Snapshot("q-0099")
	if s.Queue == nil || len(s.Queue.Groups) != MaxGroups || s.Queue.Groups[9].Group != "g-09" || s.Queue.Groups[9].Lag[0] != 9909 {
		t.Fatalf("q-0099: %+v", s.Queue)
	}
	if s := h.Snapshot("q-0100"); s.Queue != nil {
		t.Fatalf("q-0100 is past the bound but kept: %+v", s.Queue)
	}
	if s := h.Snapshot("no-such-queue"); s.Queue != nil {
		t.Fatal("an unknown queue has series")
	}
}

func TestHistoryGapsWhereAQueueOrGroupIsMissingAndForgetsItOnceOutOfTheWindow(t *testing.T) {
	h := New(DefaultInterval)
	h.Record(manyQueues(0, 2, 2))
	one := manyQueues(1, 1, 1) // q-0001 and q-0000's g-01 missing
	h.Record(one)
	s := h.Snapshot("q-0000")
	if s.Queue.Pushed[1] != 0 || len(s.Queue.Groups) != 2 || !math.IsNaN(s.Queue.Groups[1].Lag[1]) || s.Queue.Groups[0].Lag[1] != 0 {
		t.Fatalf("q-0000: %+v", s.Queue)
	}
	if s := h.Snapshot("q-0001"); !math.IsNaN(s.Queue.Pushed[1]) || s.Queue.Pushed[0] != 1 {
		t.Fatalf("q-0001: %+v", s.Queue)
	}
	// A full window later q-0001 and g-01 are forgotten, and their place
	// goes to others.
	for k := 2; k <= Capacity; k++ {
		h.Record(manyQueues(k, 1, 1))
	}
	if s := h.Snapshot("q-0001"); s.Queue != nil {
		t.Fatalf("q-0001 still kept with no value in the window: %+v", s.Queue)
	}
	if g := h.Snapshot("q-0000").Queue.Groups; len(g) != 1 {
		t.Fatalf("groups: %+v", g)
	}
	full := manyQueues(Capacity+1, 1000, 1)
	h.Record(full)
	if len(h.queues) != MaxQueues {
		t.Fatalf("%d queues after the room was freed", len(h.queues))
	}
}

func TestSeriesWritesGapsAsNull(t *testing.T) {
	b, err := json.Marshal(Series{1, math.NaN(), 2.5, 123456789012, math.Inf(1)})
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != "[1,null,2.5,123456789012,null]" {
		t.Fatalf("got %s", b)
	}
}

// TestHistoryMemoryWithAThousandQueuesOfTenGroups fills the history with
// 1,000 queues of 10 groups each, and says what it holds.
func TestHistoryMemoryWithAThousandQueuesOfTenGroups(t *testing.T) {
	before := heapInUse()
	h := New(DefaultInterval)
	// Each sample's names are new strings, as each read from the database
	// is: the history keeps those of the first sample a queue appears in.
	for k := range Capacity {
		h.Record(manyQueues(k, 1000, 10))
	}
	used := heapInUse() - before
	runtime.KeepAlive(h)
	t.Logf("1,000 queues of 10 groups, %d samples: %d bytes kept (values bound %d bytes)", Capacity, used, ValueBytes)
	// Values, names and maps: well within twice the values' bound.
	if used > 2*ValueBytes {
		t.Fatalf("the history holds %d bytes, more than twice its bound of %d", used, ValueBytes)
	}
}

func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

func TestRunSamplesUntilTheContextEnds(t *testing.T) {
	h := New(10 * time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	reads := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.Run(ctx, func(rctx context.Context) Sample {
			if _, ok := rctx.Deadline(); !ok {
				t.Error("a read without a deadline")
			}
			reads++
			return Sample{Pushed: float64(reads), Consumed: math.NaN(), DatabaseLatencyMs: math.NaN(), SpoolRecords: 0}
		})
	}()
	deadline := time.Now().Add(10 * time.Second)
	for len(h.Snapshot("").At) < 3 {
		if time.Now().After(deadline) {
			t.Fatal("fewer than 3 samples in 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	s := h.Snapshot("")
	for k := 1; k < len(s.At); k++ {
		if !s.At[k].After(s.At[k-1]) || s.Pushed[k] != s.Pushed[k-1]+1 {
			t.Fatalf("samples out of order: %v %v", s.At, s.Pushed)
		}
	}
	n := len(s.At)
	time.Sleep(30 * time.Millisecond)
	if len(h.Snapshot("").At) != n {
		t.Fatal("sampling went on after the context ended")
	}
}
