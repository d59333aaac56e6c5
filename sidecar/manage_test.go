package sidecar

import (
	"errors"
	"fmt"
	"testing"
	"time"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
)

// deadLetter pushes a message to queue/partition and fails it past a retry
// limit of 0 in group g, so that it is dead-lettered.
func deadLetter(t *testing.T, c *queenside.Client, queue, partition, txid, reason string) {
	t.Helper()
	mustPush(t, c, item(t, queue, partition, txid, txid))
	res := mustPop(t, c, protocol.PopArgs{Queue: queue, Partition: partition, Group: "g"})
	ar := mustAck(t, c, queenside.Failed(res.Messages[0], reason))
	if !ar.Results[0].DeadLettered {
		t.Fatalf("not dead-lettered: %+v", ar.Results)
	}
}

func TestDeadLettersListAndReplayAsNewMessages(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	ctx := testContext(t)
	configure(t, c, "d", func(o *protocol.QueueOptions) { o.RetryLimit = 0 })
	mustPop(t, c, protocol.PopArgs{Queue: "d", Group: "other"}) // a second group, subscribed from the start
	deadLetter(t, c, "d", "p", "first", "boom")
	deadLetter(t, c, "d", "q", "second", "bang")
	deadLetter(t, c, "d", "p", "third", "crash")

	page, err := c.DLQ(ctx, queenside.DLQArgs{Queue: "d", Limit: 2})
	if err != nil || len(page.Entries) != 2 || page.NextAfterID == nil {
		t.Fatalf("first page: %+v %v", page, err)
	}
	e := page.Entries[0]
	if e.TransactionID != "first" || e.Error != "boom" || e.Failures != 1 || e.Group != "g" || e.Partition != "p" ||
		e.Offset != 0 || e.ReplayedAt != nil || e.DeadAt.Before(e.CommittedAt) {
		t.Fatalf("entry: %+v", e)
	}
	rest, err := c.DLQ(ctx, queenside.DLQArgs{Queue: "d", AfterID: *page.NextAfterID})
	if err != nil || len(rest.Entries) != 1 || rest.Entries[0].TransactionID != "third" || rest.NextAfterID != nil {
		t.Fatalf("second page: %+v %v", rest, err)
	}
	part := "q"
	if f, err := c.DLQ(ctx, queenside.DLQArgs{Queue: "d", Partition: &part}); err != nil || len(f.Entries) != 1 || f.Entries[0].TransactionID != "second" {
		t.Fatalf("filtered by partition: %+v %v", f, err)
	}

	// Replayed twice: two new messages, with fresh transaction ids.
	var replays []protocol.DLQReplayResult
	for range 2 {
		r, err := c.DLQReplay(ctx, e.ID)
		if err != nil || len(r) != 1 || r[0].Status != protocol.StatusQueued || r[0].TransactionID == e.TransactionID {
			t.Fatalf("replay: %+v %v", r, err)
		}
		replays = append(replays, r[0])
	}
	if replays[0].TransactionID == replays[1].TransactionID || *replays[0].Offset == *replays[1].Offset {
		t.Fatalf("two replays made one message: %+v", replays)
	}
	again, _ := c.DLQ(ctx, queenside.DLQArgs{Queue: "d", Limit: 1})
	if r := again.Entries[0]; r.ReplayedAt == nil || r.ReplayedTransactionID != replays[1].TransactionID || *r.ReplayedOffset != *replays[1].Offset {
		t.Fatalf("the entry does not record its last replay: %+v", r)
	}
	// Both replays reach every group, with the original payload.
	for _, group := range []string{"g", "other"} {
		got := map[string]bool{}
		for _, m := range drain(t, c, "d", group) {
			if m.Partition == "p" && m.Offset >= *replays[0].Offset {
				got[m.TransactionID] = string(m.Payload) == string(item(t, "d", "p", "", "first").Payload)
			}
		}
		if !got[replays[0].TransactionID] || !got[replays[1].TransactionID] {
			t.Fatalf("group %s did not get both replays with the payload: %v", group, got)
		}
	}
	if r, err := c.DLQReplay(ctx, 999999); err != nil || r[0].Status != protocol.StatusFailed || r[0].Error.Code != protocol.CodeNotFound {
		t.Fatalf("replay of a missing entry: %+v %v", r, err)
	}
	if _, err := c.DLQ(ctx, queenside.DLQArgs{Queue: "never"}); !isCode(err, protocol.CodeNotFound) {
		t.Fatalf("dlq of a missing queue: %v", err)
	}
}

func TestSeekToATimeLandsEachPartitionOnItsOwnFirstMessage(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	ctx := testContext(t)
	for p := 0; p < 3; p++ { // offsets 0..p before the mark
		pushN(t, c, "s", fmt.Sprintf("p%d", p), "before", p+1)
	}
	drain(t, c, "s", "g")
	time.Sleep(20 * time.Millisecond)
	mark := time.Now()
	time.Sleep(20 * time.Millisecond)
	for p := 0; p < 3; p++ {
		pushN(t, c, "s", fmt.Sprintf("p%d", p), "after", 2)
	}
	// A live lease of the group on p0 is released by the seek.
	held := mustPop(t, c, protocol.PopArgs{Queue: "s", Partition: "p0", Group: "g", Batch: 1})
	cursors, err := c.Seek(ctx, "s", "g", "", queenside.SeekAt(mark))
	if err != nil || len(cursors) != 3 {
		t.Fatalf("seek: %+v %v", cursors, err)
	}
	for p, cur := range cursors {
		if cur.Partition != fmt.Sprintf("p%d", p) || cur.Cursor != int64(p+1) {
			t.Fatalf("partition %d: cursor %+v, want %d (its first message after the mark)", p, cur, p+1)
		}
	}
	if ar := mustAck(t, c, queenside.Completed(held.Messages[0])); ar.Results[0].Success {
		t.Fatal("the lease held before the seek still acks")
	}
	got := drain(t, c, "s", "g")
	if len(got) != 6 {
		t.Fatalf("after the seek the group got %d messages, want the 6 pushed after the mark", len(got))
	}
	for _, m := range got {
		if m.CommittedAt.Before(mark) {
			t.Fatalf("delivered %s/%d committed before the mark", m.Partition, m.Offset)
		}
	}
	// beginning and end, for one partition.
	if cur, err := c.Seek(ctx, "s", "g", "p2", queenside.SeekBeginning); err != nil || len(cur) != 1 || cur[0].Cursor != 0 {
		t.Fatalf("seek p2 to the beginning: %+v %v", cur, err)
	}
	if got := drain(t, c, "s", "g"); len(got) != 5 {
		t.Fatalf("p2 from the beginning: %d messages, want 5", len(got))
	}
	if cur, err := c.Seek(ctx, "s", "g", "p2", queenside.SeekEnd); err != nil || cur[0].Cursor != 5 {
		t.Fatalf("seek p2 to the end: %+v %v", cur, err)
	}
	if _, err := c.Seek(ctx, "s", "g", "nope", queenside.SeekEnd); !isCode(err, protocol.CodeNotFound) {
		t.Fatalf("seek of a missing partition: %v", err)
	}
}

func TestTransactionAcksAndPushesTogetherOrNotAtAll(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	ctx := testContext(t)
	pushN(t, c, "a", "p", "in", 2)
	out := func(n int) []protocol.PushItem {
		return []protocol.PushItem{item(t, "b", "p", fmt.Sprintf("out-%d-0", n), n), item(t, "b", "p", fmt.Sprintf("out-%d-1", n), n)}
	}

	// It commits: the ack moves the cursor and both pushes are stored.
	res := mustPop(t, c, protocol.PopArgs{Queue: "a", Group: "g"})
	tr, err := c.Transaction(ctx, []queenside.AckItem{queenside.Completed(res.Messages[0])}, out(0))
	if err != nil || !tr.Acks[0].Success || tr.Pushes[0].Status != protocol.StatusQueued || tr.Pushes[1].Status != protocol.StatusQueued {
		t.Fatalf("transaction: %+v %v", tr, err)
	}
	if cur, _ := cursorOf(t, c, "a", "p", "g"); cur != 1 {
		t.Fatalf("cursor %d after the transaction, want 1", cur)
	}
	// The same pushes again are duplicates, as in push.
	res = mustPop(t, c, protocol.PopArgs{Queue: "a", Group: "g"})
	tr, err = c.Transaction(ctx, []queenside.AckItem{queenside.Completed(res.Messages[0])}, out(0))
	if err != nil || tr.Pushes[0].Status != protocol.StatusDuplicate {
		t.Fatalf("repeated pushes: %+v %v", tr, err)
	}

	// The lease expires first: conflict, and neither happens.
	pushN(t, c, "a", "p", "more", 1)
	res = mustPop(t, c, protocol.PopArgs{Queue: "a", Group: "g", LeaseSeconds: 1})
	time.Sleep(1100 * time.Millisecond)
	_, err = c.Transaction(ctx, []queenside.AckItem{queenside.Completed(res.Messages[0])}, out(1))
	var pe *protocol.Error
	if !errors.As(err, &pe) || pe.Code != protocol.CodeConflict || pe.Details["acks"] == nil {
		t.Fatalf("transaction on an expired lease: %v, want conflict with the ack results", err)
	}
	if cur, _ := cursorOf(t, c, "a", "p", "g"); cur != 2 {
		t.Fatalf("cursor %d after the conflict, want 2 (unmoved)", cur)
	}
	for _, m := range storedMessages(t, ts.pool, "b", "p") {
		if m.TransactionID == "out-1-0" || m.TransactionID == "out-1-1" {
			t.Fatalf("a push of the failed transaction was stored: %s", m.TransactionID)
		}
	}
	if got := len(storedMessages(t, ts.pool, "b", "p")); got != 2 {
		t.Fatalf("queue b holds %d messages, want the 2 of the committed transaction", got)
	}
}

func TestDelayedMessagesWaitTheirDelay(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	configure(t, c, "late", func(o *protocol.QueueOptions) { o.DelaySeconds = 1 })
	mustPush(t, c, item(t, "late", "p", "x", 1))
	if res := mustPop(t, c, protocol.PopArgs{Queue: "late", AutoAck: true}); len(res.Messages) != 0 {
		t.Fatal("a delayed message was delivered at once")
	}
	start := time.Now()
	res := mustPop(t, c, protocol.PopArgs{Queue: "late", AutoAck: true, WaitMs: 3000})
	if len(res.Messages) != 1 {
		t.Fatalf("the delayed message was not delivered within 3 s: %+v", res)
	}
	if since := time.Since(res.Messages[0].CommittedAt); since < time.Second {
		t.Fatalf("delivered %v after its commit, before its 1 s delay (waited %v)", since, time.Since(start))
	}
}

func TestGroupsShowLagAndDeleteGroupRemovesOne(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	ctx := testContext(t)
	pushN(t, c, "gq", "p1", "a", 5)
	pushN(t, c, "gq", "p2", "b", 3)
	mustPop(t, c, protocol.PopArgs{Queue: "gq", Group: "fast", Batch: 100, Partitions: 10, AutoAck: true})
	mustPop(t, c, protocol.PopArgs{Queue: "gq", Partition: "p1", Group: "slow", Batch: 2})
	groups, err := c.Groups(ctx, "gq")
	if err != nil || len(groups) != 2 {
		t.Fatalf("groups: %+v %v", groups, err)
	}
	fast, slow := groups[0], groups[1]
	if fast.Group != "fast" || fast.Lag != 0 || fast.LeasedPartitions != 0 || fast.OldestUnackedAt != nil {
		t.Fatalf("fast: %+v", fast)
	}
	if slow.Group != "slow" || slow.Lag != 8 || slow.LeasedPartitions != 1 || slow.OldestUnackedAt == nil {
		t.Fatalf("slow: %+v", slow)
	}
	if all, err := c.Groups(ctx, ""); err != nil || len(all) < 2 {
		t.Fatalf("every queue's groups: %+v %v", all, err)
	}
	if deleted, err := c.DeleteGroup(ctx, "gq", "slow"); err != nil || !deleted {
		t.Fatalf("delete: %v %v", deleted, err)
	}
	if deleted, err := c.DeleteGroup(ctx, "gq", "slow"); err != nil || deleted {
		t.Fatalf("delete again: %v %v", deleted, err)
	}
	if groups, _ := c.Groups(ctx, "gq"); len(groups) != 1 {
		t.Fatalf("after delete: %+v", groups)
	}
	// The name can be used again: a new group, from the start.
	if got := drain(t, c, "gq", "slow"); len(got) != 8 {
		t.Fatalf("the recreated group got %d messages, want 8", len(got))
	}
	if _, err := c.Groups(ctx, "never"); !isCode(err, protocol.CodeNotFound) {
		t.Fatalf("groups of a missing queue: %v", err)
	}
}

func TestDeletedGroupIsForgottenByEverySidecar(t *testing.T) {
	a := startSidecar(t, "", Options{})
	b := startSidecar(t, a.dbURL, Options{})
	ca, cb := a.client(t), b.client(t)
	pushN(t, ca, "dg", "p", "m", 3)
	if got := drain(t, ca, "dg", "x"); len(got) != 3 { // a caches the group's id
		t.Fatalf("first drain: %d", len(got))
	}
	if deleted, err := cb.DeleteGroup(testContext(t), "dg", "x"); err != nil || !deleted {
		t.Fatalf("delete through b: %v %v", deleted, err)
	}
	// a's cached id is stale: its next pop makes a new group, from the start.
	if res := mustPop(t, ca, protocol.PopArgs{Queue: "dg", Group: "x", Batch: 10, AutoAck: true}); len(res.Messages) != 3 {
		t.Fatalf("pop after the delete: %d messages, want all 3 again", len(res.Messages))
	}
	// And a seek through a after another delete through b.
	if _, err := cb.DeleteGroup(testContext(t), "dg", "x"); err != nil {
		t.Fatal(err)
	}
	if cur, err := ca.Seek(testContext(t), "dg", "x", "", queenside.SeekEnd); err != nil || len(cur) != 1 || cur[0].Cursor != 3 {
		t.Fatalf("seek after the delete: %+v %v", cur, err)
	}
}
