package store

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"

	"github.com/queenside/queenside/sidecar/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func openStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(context.Background(), pgtest.NewDatabase(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func messages(partition, prefix string, n int) []Message {
	out := make([]Message, n)
	for i := range out {
		out[i] = Message{Queue: "q", Partition: partition, Payload: []byte{0xc0},
			TransactionID: fmt.Sprintf("%s-%d", prefix, i), MessageID: uuid.Must(uuid.NewV7())}
	}
	return out
}

func newJob(msgs []Message) *pushJob {
	return &pushJob{ctx: context.Background(), msgs: msgs, done: make(chan pushResult, 1)}
}

// One request whose data PostgreSQL refuses fails alone; the requests fused
// with it are stored as if it had never been there.
func TestFusedFailureIsIsolated(t *testing.T) {
	s := openStore(t)
	bad := messages("p", "bad", 1)
	bad[0].TransactionID = "not \xff utf-8" // refused by PostgreSQL's text input
	jobs := []*pushJob{newJob(messages("p", "a", 3)), newJob(bad), newJob(messages("p", "b", 2)), newJob(messages("other", "c", 2))}
	s.pushes.RunBatch(jobs)
	results := make([]pushResult, len(jobs))
	for i, j := range jobs {
		results[i] = <-j.done
	}
	if results[1].err == nil {
		t.Fatal("the bad request was stored")
	}
	wantOffsets := [][]int64{{0, 1, 2}, nil, {3, 4}, {0, 1}}
	for i, r := range results {
		if i == 1 {
			continue
		}
		if r.err != nil {
			t.Fatalf("request %d failed with the bad one: %v", i, r.err)
		}
		for k, o := range r.out {
			if o.Offset != wantOffsets[i][k] || o.Duplicate {
				t.Fatalf("request %d: outcomes %+v, want offsets %v", i, r.out, wantOffsets[i])
			}
		}
	}
}

// A transaction id repeated across fused requests is a duplicate of the
// earlier request's message, as if the two had run one after the other.
func TestFusedRepeatIsADuplicateOfTheEarlierRequest(t *testing.T) {
	s := openStore(t)
	first, second := messages("p", "same", 1), messages("p", "same", 1)
	jobs := []*pushJob{newJob(first), newJob(second)}
	s.pushes.RunBatch(jobs)
	a, b := <-jobs[0].done, <-jobs[1].done
	if a.err != nil || b.err != nil {
		t.Fatal(a.err, b.err)
	}
	if a.out[0].Duplicate || !b.out[0].Duplicate || b.out[0].MessageID != first[0].MessageID || b.out[0].Offset != 0 {
		t.Fatalf("first %+v, second %+v", a.out[0], b.out[0])
	}
}

// A caller that gave up before its turn has nothing written.
func TestFusedSkipsDepartedCallers(t *testing.T) {
	s := openStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	gone := &pushJob{ctx: ctx, msgs: messages("p", "gone", 1), done: make(chan pushResult, 1)}
	kept := newJob(messages("p", "kept", 1))
	s.pushes.RunBatch([]*pushJob{gone, kept})
	if r := <-gone.done; r.err == nil {
		t.Fatal("a canceled request was stored")
	}
	if r := <-kept.done; r.err != nil || r.out[0].Offset != 0 {
		t.Fatalf("the other request: %+v", r)
	}
}
