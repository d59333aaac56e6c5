package sidecar

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/store"
)

// fillDeadLetters dead-letters n messages of queue in group "g", spread
// over parts partitions, each failing with reason(i): pushed, popped and
// failed in big batches under a retry limit of 0.
func fillDeadLetters(t *testing.T, c *queenside.Client, queue string, n, parts int, reason func(i int) string) {
	t.Helper()
	configure(t, c, queue, func(o *protocol.QueueOptions) { o.RetryLimit = 0 })
	mustPop(t, c, protocol.PopArgs{Queue: queue, Group: "g"}) // subscribes g from the start
	for p := 0; p < parts; p++ {
		pushN(t, c, queue, fmt.Sprintf("p%d", p), queue, n/parts)
	}
	// A failure ends its lease: each call dead-letters the first message
	// of every lease, and the rest of the lease is delivered again.
	dead := 0
	for dead < n {
		res := mustPop(t, c, protocol.PopArgs{Queue: queue, Group: "g", Batch: 10 * parts, Partitions: parts})
		if len(res.Messages) == 0 {
			t.Fatalf("%d of %d dead-lettered, then nothing left to pop", dead, n)
		}
		var items []protocol.AckItem
		failed := map[string]bool{}
		for _, m := range res.Messages {
			if !failed[m.LeaseID] {
				failed[m.LeaseID] = true
				items = append(items, queenside.Failed(m, reason(dead+len(items))))
			}
		}
		for _, r := range mustAck(t, c, items...).Results {
			if !r.DeadLettered {
				t.Fatalf("not dead-lettered: %+v", r)
			}
		}
		dead += len(items)
	}
}

// replayState counts, in the database, the messages of queue's partitions
// and the dead letters marked replayed, and checks that every mark names
// one stored message of its own.
func replayState(t *testing.T, ts *testSidecar, queue string) (messages, marked int) {
	t.Helper()
	ctx := testContext(t)
	err := ts.pool.QueryRow(ctx, `SELECT coalesce(sum(s.last_offset - s.base_offset + 1), 0)
		FROM queenside.segments s JOIN queenside.partitions p ON p.id = s.partition_id
		JOIN queenside.queues q ON q.id = p.queue_id WHERE q.name = $1`, queue).Scan(&messages)
	if err != nil {
		t.Fatal(err)
	}
	var distinct, stored int
	err = ts.pool.QueryRow(ctx, `SELECT count(replayed_at), count(DISTINCT replay_transaction_id),
		count(*) FILTER (WHERE EXISTS (
			SELECT 1 FROM queenside.segments s
			 WHERE s.partition_id = d.partition_id AND d.replay_offset BETWEEN s.base_offset AND s.last_offset
			   AND s.transaction_ids[d.replay_offset - s.base_offset + 1] = d.replay_transaction_id))
		FROM queenside.dead_letters d WHERE queue_name = $1`, queue).Scan(&marked, &distinct, &stored)
	if err != nil {
		t.Fatal(err)
	}
	if distinct != marked || stored != marked {
		t.Fatalf("%d marks, %d distinct replays, %d found stored at their offset", marked, distinct, stored)
	}
	return messages, marked
}

// A replay of 10,000 dead letters stopped halfway (a bounded number of
// batches, then a batch whose context is cancelled while it runs), then
// started again twice at once, replays each dead letter exactly once.
func TestDLQReplayInterruptedAndStartedAgainReplaysEachOnce(t *testing.T) {
	const n, parts = 10000, 100
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	fillDeadLetters(t, c, "bulk", n, parts, func(i int) string { return fmt.Sprintf("error %d", i%3) })
	ctx := testContext(t) // after the filling, which takes longer on Citus
	filter := queenside.DLQFilter{Queue: "bulk"}

	args := queenside.DLQReplayArgs{DLQSelection: queenside.DLQSelection{DLQFilter: filter, Limit: 500}}
	for range 10 {
		r, err := c.DLQReplayBatch(ctx, args)
		if err != nil || r.Replayed != 500 || r.Skipped != 0 || r.Failed != 0 || r.NextAfterID == nil || len(r.Results) != 500 {
			t.Fatalf("batch: replayed %d skipped %d failed %d next %v: %v", r.Replayed, r.Skipped, r.Failed, r.NextAfterID, err)
		}
		args.AfterID = *r.NextAfterID
	}
	if msgs, marked := replayState(t, ts, "bulk"); msgs != n+n/2 || marked != n/2 {
		t.Fatalf("after 10 batches of 500: %d messages, %d marked", msgs, marked)
	}

	// A batch cancelled while it runs commits all of itself or nothing.
	dls, _, err := ts.srv.store.DeadLetters(ctx, protocol.DLQSelection{DLQFilter: filter, AfterID: args.AfterID, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	msgs := make([]store.Message, len(dls))
	for i, d := range dls {
		m, perr := ts.srv.replayMessage(d)
		if perr != nil {
			t.Fatal(perr)
		}
		msgs[i] = m
	}
	cut, cancel := context.WithTimeout(ctx, 3*time.Millisecond)
	_, cutErr := ts.srv.store.ReplayDeadLetters(cut, dls, msgs, false)
	cancel()
	msgsNow, marked := replayState(t, ts, "bulk")
	if cutErr == nil && (marked != n/2+1000 || msgsNow != n+n/2+1000) || cutErr != nil && (marked != n/2 || msgsNow != n+n/2) {
		t.Fatalf("a cut batch (error %v) left %d messages and %d marks", cutErr, msgsNow, marked)
	}
	t.Logf("the cut batch: %v", cutErr)

	// Started again from the beginning, twice at once: entries replayed
	// already are skipped, the others replayed once between the two.
	var wg sync.WaitGroup
	totals := make([]queenside.DLQReplayReply, 2)
	errs := make([]error, 2)
	for k := range totals {
		wg.Add(1)
		go func() {
			defer wg.Done()
			totals[k], errs[k] = dialClient(t, ts.socket).DLQReplayAll(ctx, filter, false, nil)
		}()
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	replayed := totals[0].Replayed + totals[1].Replayed
	if replayed != n-marked || totals[0].Failed+totals[1].Failed != 0 ||
		totals[0].Replayed+totals[0].Skipped != n || totals[1].Replayed+totals[1].Skipped != n {
		t.Fatalf("two runs again after %d replays: %+v and %+v", marked, totals[0], totals[1])
	}
	if msgs, marked := replayState(t, ts, "bulk"); msgs != 2*n || marked != n {
		t.Fatalf("at the end: %d messages (want %d), %d marked (want %d)", msgs, 2*n, marked, n)
	}
	// Asked to, a replay replays again.
	again, err := c.DLQReplayBatch(ctx, queenside.DLQReplayArgs{IncludeReplayed: ptr(true),
		DLQSelection: queenside.DLQSelection{DLQFilter: filter, Limit: 10}})
	if err != nil || again.Replayed != 10 {
		t.Fatalf("includeReplayed: %+v %v", again, err)
	}
	if msgs, _ := replayState(t, ts, "bulk"); msgs != 2*n+10 {
		t.Fatalf("after replaying 10 again: %d messages", msgs)
	}
}

func ptr[T any](v T) *T { return &v }

func TestDLQFilterCountSummaryAndDelete(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	ctx := testContext(t)
	fillDeadLetters(t, c, "f", 30, 3, func(i int) string {
		if i%3 == 0 {
			return "timeout talking to billing"
		}
		return "bad json"
	})
	before := time.Now()

	count := func(f queenside.DLQArgs) int64 {
		t.Helper()
		f.Count, f.Limit = true, 1
		res, err := c.DLQ(ctx, f)
		if err != nil || res.Count == nil {
			t.Fatalf("dlq count %+v: %+v %v", f, res, err)
		}
		return *res.Count
	}
	part := "p1"
	if got := count(queenside.DLQArgs{Queue: "f"}); got != 30 {
		t.Fatalf("count: %d", got)
	}
	if got := count(queenside.DLQArgs{Queue: "f", ErrorContains: "billing"}); got != 10 {
		t.Fatalf("errorContains billing: %d", got)
	}
	json, billing := count(queenside.DLQArgs{Queue: "f", Partition: &part, ErrorContains: "json"}),
		count(queenside.DLQArgs{Queue: "f", Partition: &part, ErrorContains: "billing"})
	if count(queenside.DLQArgs{Queue: "f", Partition: &part}) != 10 || json+billing != 10 {
		t.Fatalf("partition p1: %d json, %d billing", json, billing)
	}
	if got := count(queenside.DLQArgs{Queue: "f", DeadFrom: &before}); got != 0 {
		t.Fatalf("dead after the fill: %d", got)
	}
	if got := count(queenside.DLQArgs{Queue: "f", DeadTo: &before}); got != 30 {
		t.Fatalf("dead before the end of the fill: %d", got)
	}
	page, err := c.DLQ(ctx, queenside.DLQArgs{Queue: "f", ErrorContains: "billing", Limit: 100})
	if err != nil || len(page.Entries) != 10 || page.Entries[0].Error != "timeout talking to billing" {
		t.Fatalf("a filtered page: %+v %v", page, err)
	}

	sum, err := c.DLQSummary(ctx, "f", 0)
	if err != nil || len(sum) != 2 || sum[0].Error != "bad json" || sum[0].Count != 20 || sum[1].Count != 10 ||
		sum[0].Group != "g" || sum[0].FirstDeadAt.After(sum[0].LastDeadAt) {
		t.Fatalf("summary: %+v %v", sum, err)
	}
	if _, err := c.DLQReplayBatch(ctx, queenside.DLQReplayArgs{DLQSelection: queenside.DLQSelection{IDs: []int64{page.Entries[0].ID}}}); err != nil {
		t.Fatal(err)
	}
	if sum, _ := c.DLQSummary(ctx, "", 1); len(sum) != 1 || sum[0].Count != 20 {
		t.Fatalf("summary of every queue, limit 1: %+v", sum)
	}
	if sum, _ := c.DLQSummary(ctx, "f", 0); sum[1].Replayed != 1 {
		t.Fatalf("the replayed one is not counted: %+v", sum)
	}

	// Named by ids, a replayed entry is skipped only when asked to be.
	one := queenside.DLQSelection{IDs: []int64{page.Entries[0].ID, 999999}}
	r, err := c.DLQReplayBatch(ctx, queenside.DLQReplayArgs{DLQSelection: one, IncludeReplayed: ptr(false)})
	if err != nil || r.Skipped != 1 || r.Failed != 1 || r.Results[0].Status != protocol.StatusSkipped ||
		r.Results[1].Error == nil || r.Results[1].Error.Code != protocol.CodeNotFound {
		t.Fatalf("ids with includeReplayed false: %+v %v", r, err)
	}

	// Delete by filter, in batches of 4, then by ids.
	deleted, err := c.DLQDeleteAll(ctx, queenside.DLQFilter{Queue: "f", ErrorContains: "billing"})
	if err != nil || deleted != 10 {
		t.Fatalf("delete billing: %d %v", deleted, err)
	}
	d, err := c.DLQDelete(ctx, queenside.DLQSelection{DLQFilter: queenside.DLQFilter{Queue: "f"}, Limit: 4})
	if err != nil || d.Deleted != 4 || d.NextAfterID == nil {
		t.Fatalf("one batch of 4: %+v %v", d, err)
	}
	rest, _ := c.DLQ(ctx, queenside.DLQArgs{Queue: "f", Limit: 2})
	d, err = c.DLQDelete(ctx, queenside.DLQSelection{IDs: []int64{rest.Entries[0].ID, rest.Entries[1].ID, 999999}})
	if err != nil || d.Deleted != 2 {
		t.Fatalf("delete by ids: %+v %v", d, err)
	}
	if got := count(queenside.DLQArgs{Queue: "f"}); got != 14 {
		t.Fatalf("left: %d", got)
	}

	// Bad input.
	for name, call := range map[string]func() error{
		"ids and filter": func() error {
			_, err := c.DLQDelete(ctx, queenside.DLQSelection{IDs: []int64{1}, DLQFilter: queenside.DLQFilter{Queue: "f"}})
			return err
		},
		"neither": func() error { _, err := c.DLQDelete(ctx, queenside.DLQSelection{}); return err },
		"deadTo before deadFrom": func() error {
			_, err := c.DLQReplayBatch(ctx, queenside.DLQReplayArgs{DLQSelection: queenside.DLQSelection{
				DLQFilter: queenside.DLQFilter{Queue: "f", DeadFrom: &before, DeadTo: ptr(before.Add(-time.Hour))}}})
			return err
		},
		"limit over 1000": func() error {
			_, err := c.DLQDelete(ctx, queenside.DLQSelection{DLQFilter: queenside.DLQFilter{Queue: "f"}, Limit: 1001})
			return err
		},
	} {
		if err := call(); !isCode(err, protocol.CodeInvalidArgument) {
			t.Errorf("%s: %v, want invalid_argument", name, err)
		}
	}
	if _, err := c.DLQDelete(ctx, queenside.DLQSelection{DLQFilter: queenside.DLQFilter{Queue: "nope"}}); !isCode(err, protocol.CodeNotFound) {
		t.Errorf("delete from a missing queue: %v", err)
	}
	if _, err := c.DLQSummary(ctx, "nope", 0); !isCode(err, protocol.CodeNotFound) {
		t.Errorf("summary of a missing queue: %v", err)
	}
}
