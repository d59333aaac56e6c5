package store

import (
	"context"
	"testing"

	"github.com/google/uuid"
)

// A replay mark commits with its batch or not at all, only moves forward,
// and goes when its segment is forgotten.
func TestReplayMarkCommitsWithItsBatch(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	seg := uuid.New()
	if end, err := s.ReplayedTo(ctx, seg); err != nil || end != 0 {
		t.Fatalf("ReplayedTo of a segment never replayed = %d, %v", end, err)
	}
	if _, err := s.PushReplay(ctx, messages("p", "a", 3), ReplayMark{Segment: seg, End: 300}); err != nil {
		t.Fatal(err)
	}
	if end, err := s.ReplayedTo(ctx, seg); err != nil || end != 300 {
		t.Fatalf("ReplayedTo after a batch = %d, %v; want 300", end, err)
	}

	bad := messages("p", "bad", 2)
	bad[1].TransactionID = "not \xff utf-8" // refused by PostgreSQL's text input
	if _, err := s.PushReplay(ctx, bad, ReplayMark{Segment: seg, End: 500}); err == nil {
		t.Fatal("a batch PostgreSQL refuses was stored")
	}
	if end, _ := s.ReplayedTo(ctx, seg); end != 300 {
		t.Fatalf("a refused batch moved the mark to %d", end)
	}
	if _, err := s.PushReplay(ctx, messages("p", "b", 1), ReplayMark{Segment: seg, End: 200}); err != nil {
		t.Fatal(err)
	}
	if end, _ := s.ReplayedTo(ctx, seg); end != 300 {
		t.Fatalf("an older mark took it back to %d", end)
	}

	other := uuid.New()
	if _, err := s.PushReplay(ctx, messages("p", "c", 1), ReplayMark{Segment: other, End: 40}); err != nil {
		t.Fatal(err)
	}
	if err := s.ForgetReplayed(ctx, seg); err != nil {
		t.Fatal(err)
	}
	if end, _ := s.ReplayedTo(ctx, seg); end != 0 {
		t.Fatalf("a forgotten segment's mark is still %d", end)
	}
	if end, _ := s.ReplayedTo(ctx, other); end != 40 {
		t.Fatalf("forgetting one segment took another's mark: %d", end)
	}
	var n int
	if err := s.pool.QueryRow(ctx, "SELECT sum(cardinality(message_ids)) FROM queenside.segments").Scan(&n); err != nil || n != 5 {
		t.Fatalf("%d messages stored (%v), want 5", n, err)
	}
}
