package store

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/google/uuid"

	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/pgtest"
)

// pushOne stores one message in each of the partitions, in that order of
// commit, one push each.
func pushOne(t *testing.T, s *Store, queue string, partitions ...string) {
	t.Helper()
	for _, p := range partitions {
		m := Message{Queue: queue, Partition: p, Payload: []byte{0xc0}, TransactionID: "tx-" + p + "-" + uuid.NewString(),
			MessageID: uuid.Must(uuid.NewV7())}
		if _, err := s.Push(context.Background(), []Message{m}); err != nil {
			t.Fatal(err)
		}
	}
}

func popJob(maxBytes int, reqs ...PopRequest) *roundJob {
	return &roundJob{ctx: context.Background(), pops: reqs, maxBytes: maxBytes, done: make(chan roundResult, 1)}
}

func ackJob(items ...protocol.AckItem) *roundJob {
	return &roundJob{ctx: context.Background(), acks: items, done: make(chan roundResult, 1)}
}

func completedAll(res protocol.PopResult) []protocol.AckItem {
	var items []protocol.AckItem
	for _, m := range res.Messages {
		off := m.Offset
		items = append(items, protocol.AckItem{LeaseID: m.LeaseID, Offset: &off, Status: protocol.AckCompleted})
	}
	return items
}

func partitionsOf(res protocol.PopResult) []string {
	var out []string
	for _, l := range res.Leases {
		out = append(out, l.Partition)
	}
	return out
}

// Pops of one key in one round get the partitions in the order they
// arrived: the first the partitions whose messages waited longest, each
// no more than it asked for, and no partition twice.
func TestRoundServesPopsInArrivalOrder(t *testing.T) {
	pgtest.SkipOnCitus(t, "pops choose partitions one shard at a time, oldest first within a shard (SCALING.md)")
	s := openStore(t)
	pushOne(t, s, "q", "p0", "p1", "p2", "p3", "p4")
	req := PopRequest{Queue: "q", Group: "g", Batch: 10, Partitions: 2}
	a, b, c := popJob(1<<20, req), popJob(1<<20, req), popJob(1<<20, req)
	s.rounds.RunBatch([]*roundJob{a, b, c})
	got := [][]string{}
	for _, j := range []*roundJob{a, b, c} {
		r := <-j.done
		if r.popErrs[0] != nil {
			t.Fatal(r.popErrs[0])
		}
		got = append(got, partitionsOf(r.pops[0]))
	}
	want := fmt.Sprint([][]string{{"p0", "p1"}, {"p2", "p3"}, {"p4"}})
	if fmt.Sprint(got) != want {
		t.Fatalf("partitions served %v, want %v", got, want)
	}
}

// Acks in one round each get their own answer, numbered from their first
// item, with the states of their own leases; and one whose data
// PostgreSQL refuses fails alone, the round's other requests served as if
// it had not been there.
func TestRoundAnswersEachAckAndIsolatesAFailure(t *testing.T) {
	s := openStore(t)
	pushOne(t, s, "q", "p0", "p1", "p2")
	leased, errs := s.PopMany(context.Background(), []PopRequest{
		{Queue: "q", Group: "g", Batch: 1, Partitions: 1},
		{Queue: "q", Group: "g", Batch: 1, Partitions: 1},
		{Queue: "q", Group: "g", Batch: 1, Partitions: 1},
	}, 1<<20)
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	good1, good2 := ackJob(completedAll(leased[0])...), ackJob(completedAll(leased[1])...)
	bad := completedAll(leased[2])
	bad[0].Status, bad[0].Error = protocol.AckFailed, "not \xff text" // refused by PostgreSQL's text input
	badJob := ackJob(bad...)
	pushOne(t, s, "q", "p3")
	pop := popJob(1<<20, PopRequest{Queue: "q", Group: "g", Batch: 10, Partitions: 10})
	s.rounds.RunBatch([]*roundJob{good1, badJob, pop, good2})

	for i, j := range []*roundJob{good1, good2} {
		r := <-j.done
		if r.err != nil {
			t.Fatalf("ack %d failed with the bad one: %v", i, r.err)
		}
		if len(r.ack.Results) != 1 || r.ack.Results[0].Index != 0 || !r.ack.Results[0].Success {
			t.Fatalf("ack %d: results %+v", i, r.ack.Results)
		}
		want := leased[i].Leases[0].LeaseID
		if len(r.ack.Leases) != 1 || r.ack.Leases[0].LeaseID != want || !r.ack.Leases[0].Released {
			t.Fatalf("ack %d: leases %+v, want only %s, released", i, r.ack.Leases, want)
		}
	}
	if r := <-badJob.done; r.err == nil {
		t.Fatalf("the bad ack was applied: %+v", r.ack)
	}
	r := <-pop.done
	if r.popErrs[0] != nil || fmt.Sprint(partitionsOf(r.pops[0])) != "[p3]" {
		t.Fatalf("pop with the bad ack: %v, partitions %v, want [p3]", r.popErrs[0], partitionsOf(r.pops[0]))
	}
}

// A round whose pop result would not fit its request's limit keeps
// nothing of it, and each request is served alone: the one that fits gets
// its messages, the other the reason it cannot, and no partition stays
// leased for a result that was never sent.
func TestRoundWithATooLargeResultServesEachAlone(t *testing.T) {
	s := openStore(t)
	pushOne(t, s, "q", "p0", "p1")
	req := PopRequest{Queue: "q", Group: "g", Batch: 10, Partitions: 1}
	fits, tooSmall := popJob(1<<20, req), popJob(10, req)
	s.rounds.RunBatch([]*roundJob{fits, tooSmall})
	a, b := <-fits.done, <-tooSmall.done
	if a.popErrs[0] != nil || len(a.pops[0].Messages) != 1 {
		t.Fatalf("the pop that fits: %v, %d messages", a.popErrs[0], len(a.pops[0].Messages))
	}
	if !errors.Is(b.popErrs[0], ErrMessageTooLarge) {
		t.Fatalf("the pop that cannot fit: %v, want ErrMessageTooLarge", b.popErrs[0])
	}
	again, errs := s.PopMany(context.Background(), []PopRequest{req}, 1<<20)
	if errs[0] != nil || len(again[0].Messages) != 1 || again[0].Messages[0].Partition == a.pops[0].Messages[0].Partition {
		t.Fatalf("the other partition after the refused pop: %v, %+v", errs[0], again[0].Messages)
	}
}

// A round whose acks carry a pop with a result too large to send commits
// the acks, takes the pop's leases back as if they had never been taken,
// and serves the pop again with fewer messages: the message delivered
// then is delivered for the first time, with one attempt counted, not two.
func TestRoundWithAckCarryingATooLargePopKeepsTheAcks(t *testing.T) {
	s := openStore(t)
	pushOne(t, s, "q", "p0")
	first, errs := s.PopMany(context.Background(), []PopRequest{{Queue: "q", Group: "g", Batch: 1, Partitions: 1}}, 1<<20)
	if errs[0] != nil || len(first[0].Messages) != 1 {
		t.Fatalf("first pop: %v, %+v", errs[0], first[0].Messages)
	}
	big := make([]byte, 1000)
	for i := 0; i < 2; i++ { // two pushes: two segments of p1
		m := Message{Queue: "q", Partition: "p1", Payload: big, TransactionID: uuid.NewString(), MessageID: uuid.Must(uuid.NewV7())}
		if _, err := s.Push(context.Background(), []Message{m}); err != nil {
			t.Fatal(err)
		}
	}
	one := resultBound(protocol.PopResult{Leases: make([]protocol.Lease, 1),
		Messages: []protocol.Message{{Queue: "q", Partition: "p1", Payload: big, TransactionID: uuid.NewString()}}}, 0)
	job := &roundJob{ctx: context.Background(), acks: completedAll(first[0]), maxBytes: one + 100,
		pops: []PopRequest{{Queue: "q", Group: "g", Batch: 10, Partitions: 10}}, done: make(chan roundResult, 1)}
	s.rounds.RunBatch([]*roundJob{job})
	r := <-job.done
	if r.err != nil || len(r.ack.Results) != 1 || !r.ack.Results[0].Success {
		t.Fatalf("the ack: %v, %+v", r.err, r.ack.Results)
	}
	got := r.pops[0]
	if r.popErrs[0] != nil || len(got.Messages) != 1 || got.Messages[0].Partition != "p1" || got.Messages[0].Offset != 0 {
		t.Fatalf("the pop served again: %v, %+v", r.popErrs[0], got.Messages)
	}
	if got.Messages[0].Redelivered || got.Leases[0].HeadAttempts != 1 {
		t.Fatalf("the withdrawn delivery was counted: redelivered %v, head attempts %d",
			got.Messages[0].Redelivered, got.Leases[0].HeadAttempts)
	}
	// The ack stood: p0 has nothing more to deliver, and the rest of p1
	// comes once its lease is acked.
	if _, err := s.Ack(context.Background(), completedAll(got)); err != nil {
		t.Fatal(err)
	}
	rest, errs := s.PopMany(context.Background(), []PopRequest{{Queue: "q", Group: "g", Batch: 10, Partitions: 10}}, 1<<20)
	if errs[0] != nil || len(rest[0].Messages) != 1 || rest[0].Messages[0].Partition != "p1" || rest[0].Messages[0].Offset != 1 {
		t.Fatalf("after the ack: %v, %+v", errs[0], rest[0].Messages)
	}
}
