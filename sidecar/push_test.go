package sidecar

import (
	"fmt"
	"sync"
	"testing"
	"time"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/pgtest"
	"github.com/queenside/queenside/sidecar/store"
)

// pushConcurrently pushes from several connections at once to one partition
// and returns every result by transaction id.
func pushConcurrently(t *testing.T, clients []*queenside.Client, queue, partition string, requests, perRequest int) map[string]protocol.PushResult {
	t.Helper()
	var mu sync.Mutex
	results := make(map[string]protocol.PushResult)
	pushAtOnce(t, clients, requests, func(ci, r int) []protocol.PushItem {
		items := make([]protocol.PushItem, perRequest)
		for i := range items {
			items[i] = item(t, queue, partition, fmt.Sprintf("c%d-r%d-i%d", ci, r, i), map[string]int{"c": ci, "r": r, "i": i})
		}
		return items
	}, func(res []protocol.PushResult) {
		// Items of one request get consecutive offsets in request order.
		for i, x := range res {
			if i > 0 && *x.Offset != *res[i-1].Offset+1 {
				t.Errorf("request items got offsets %d then %d", *res[i-1].Offset, *x.Offset)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for _, x := range res {
			results[x.TransactionID] = x
		}
	})()
	return results
}

// pushAtOnce starts a goroutine per client that pushes requests requests,
// built by items, and hands each request's results to got (when not nil);
// it returns a function that waits for them. A push that fails, or an item
// that is not queued, fails the test.
func pushAtOnce(t *testing.T, clients []*queenside.Client, requests int,
	items func(conn, request int) []protocol.PushItem, got func([]protocol.PushResult)) (wait func()) {
	t.Helper()
	var wg sync.WaitGroup
	for ci, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range requests {
				res, err := c.Push(testContext(t), items(ci, r)...)
				if err != nil {
					t.Errorf("push: %v", err)
					return
				}
				for _, x := range res {
					if x.Status != protocol.StatusQueued {
						t.Errorf("%s: %s (%v)", x.TransactionID, x.Status, x.Error)
						return
					}
				}
				if got != nil {
					got(res)
				}
			}
		}()
	}
	return wg.Wait
}

// clients dials n connections to ts.
func (ts *testSidecar) clients(t testing.TB, n int) []*queenside.Client {
	t.Helper()
	cs := make([]*queenside.Client, n)
	for i := range cs {
		cs[i] = ts.client(t)
	}
	return cs
}

// checkResultsMatchStorage asserts each answer names what was stored.
func checkResultsMatchStorage(t *testing.T, results map[string]protocol.PushResult, stored map[string]storedMessage) {
	t.Helper()
	for tx, r := range results {
		m, ok := stored[tx]
		if !ok {
			t.Fatalf("%s answered queued but is not stored", tx)
		}
		if *r.Offset != m.Offset {
			t.Fatalf("%s answered offset %d, stored at %d", tx, *r.Offset, m.Offset)
		}
		if r.MessageID != fmt.Sprintf("%x-%x-%x-%x-%x", m.MessageID[0:4], m.MessageID[4:6], m.MessageID[6:8], m.MessageID[8:10], m.MessageID[10:16]) {
			t.Fatalf("%s answered messageId %s, stored %x", tx, r.MessageID, m.MessageID)
		}
		if !r.CommittedAt.Equal(m.CommittedAt) {
			t.Fatalf("%s answered committedAt %v, stored %v", tx, r.CommittedAt, m.CommittedAt)
		}
	}
}

func TestOffsetsGaplessWithEightConnections(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	const requests, perRequest = 40, 10
	results := pushConcurrently(t, ts.clients(t, 8), "orders", "p1", requests, perRequest)
	stored := checkGapless(t, storedMessages(t, ts.pool, "orders", "p1"), 8*requests*perRequest)
	checkResultsMatchStorage(t, results, stored)
}

func TestPushItemsOfOnePartitionKeepRequestOrder(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	var items []protocol.PushItem
	for i := 0; i < 50; i++ {
		items = append(items, item(t, "q", "a", fmt.Sprintf("a%d", i), i), item(t, "q", "b", fmt.Sprintf("b%d", i), i))
	}
	res := mustPush(t, c, items...)
	next := map[string]int64{}
	for i, r := range res {
		if r.Index != i || r.TransactionID != items[i].TransactionID {
			t.Fatalf("result %d is for item %d (%s)", i, r.Index, r.TransactionID)
		}
		if *r.Offset != next[r.Partition] {
			t.Fatalf("item %d in %s got offset %d, want %d", i, r.Partition, *r.Offset, next[r.Partition])
		}
		next[r.Partition]++
	}
	for _, p := range []string{"a", "b"} {
		msgs := storedMessages(t, ts.pool, "q", p)
		checkGapless(t, msgs, 50)
		for i, m := range msgs {
			if want := fmt.Sprintf("%s%d", p, i); m.TransactionID != want {
				t.Fatalf("%s offset %d holds %s, want %s", p, i, m.TransactionID, want)
			}
		}
	}
}

func TestPayloadStoredByteForByte(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	payloads := []any{nil, "text", 42, -1.5, []byte{0, 1, 2}, map[string]any{"nested": []any{1, "two", nil}}}
	var items []protocol.PushItem
	for i, p := range payloads {
		items = append(items, item(t, "bytes", "", fmt.Sprint(i), p))
	}
	mustPush(t, c, items...)
	msgs := storedMessages(t, ts.pool, "bytes", protocol.DefaultPartition)
	checkGapless(t, msgs, len(payloads))
	for i, m := range msgs {
		if string(m.Payload) != string(items[i].Payload) {
			t.Fatalf("payload %d stored as %x, sent %x", i, m.Payload, items[i].Payload)
		}
	}
}

// A partition whose last commit is later than this sidecar's clock (the
// clock stepped back, or another pod's runs ahead): a push over it and
// another partition commits both at that later time, and the other
// partition's next message is not committed before it. Commit times never
// decrease with offset, whatever the clocks do.
func TestCommitTimesStayMonotoneWhenTheClockIsBehind(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	mustPush(t, c, item(t, "q", "ahead", "a0", 0), item(t, "q", "behind", "b0", 0))
	ahead := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	if _, err := ts.pool.Exec(testContext(t),
		`UPDATE queenside.partitions SET last_committed_at = $1 WHERE name = 'ahead'`, ahead); err != nil {
		t.Fatal(err)
	}
	res := mustPush(t, c, item(t, "q", "ahead", "a1", 1), item(t, "q", "behind", "b1", 1))
	// One call takes one commit time for all its partitions, the later
	// one; on Citus a call is split by shard, and each part takes its own.
	for _, r := range res {
		if (r.Partition == "ahead" || !pgtest.Citus()) && !r.CommittedAt.Equal(ahead) {
			t.Fatalf("%s committed at %v, want the later last commit %v", r.TransactionID, r.CommittedAt, ahead)
		}
	}
	next := mustPush(t, c, item(t, "q", "behind", "b2", 2))[0]
	if next.CommittedAt.Before(res[1].CommittedAt) {
		t.Fatalf("b2 committed at %v, before b1 at %v", next.CommittedAt, res[1].CommittedAt)
	}
	checkGapless(t, storedMessages(t, ts.pool, "q", "ahead"), 2)
	checkGapless(t, storedMessages(t, ts.pool, "q", "behind"), 3)
}

// Requests over many partitions run as transactions side by side (see
// store's group commit), and these all want the same partitions, named in
// different orders. Each transaction locks its partitions in id order, so
// none waits for another in a cycle: every push succeeds (a deadlock would
// fail one), and every partition ends up gapless.
//
// On Citus each of these pushes is one transaction over every shard of the
// queue, committed in two phases, and the connections' pushes queue on
// each other's partition locks: on two cores shared with the rest of the
// suite that can take longer than the default database timeout. The
// sidecar here waits longer; a deadlock still fails a push, once
// PostgreSQL's or Citus's detector cancels a transaction in it.
func TestPushesOverTheSamePartitionsNeverDeadlock(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	ts := startSidecarWith(t, store.Options{URL: dbURL, Timeout: 30 * time.Second}, dbURL, Options{})
	const partitions, connections, requests = 80, 4, 15
	pushAtOnce(t, ts.clients(t, connections), requests, func(ci, r int) []protocol.PushItem {
		items := make([]protocol.PushItem, partitions)
		for i := range items {
			k := i // connections 1 and 3 name the partitions last to first
			if ci%2 == 1 {
				k = partitions - 1 - i
			}
			items[i] = item(t, "q", fmt.Sprintf("p%02d", k), fmt.Sprintf("c%d-r%d-p%d", ci, r, k), r)
		}
		return items
	}, nil)()
	for k := range partitions {
		checkGapless(t, storedMessages(t, ts.pool, "q", fmt.Sprintf("p%02d", k)), connections*requests)
	}
}

// Partitions created by several producers at once, naming the same new
// partitions in different orders while consumer groups appear: creators
// share the queue's lock, so none waits for another in a cycle, and every
// partition has a cursor in every group however the two interleave.
func TestPartitionsAndGroupsCreatedAtOnceMeetInEveryCursor(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	const producers, rounds, perRound, groups = 4, 10, 40, 5
	consumer := ts.client(t)
	// The queue exists first: a group's first pop of a queue that does not
	// exist yet creates nothing.
	configure(t, consumer, "q", func(*protocol.QueueOptions) {})
	wait := pushAtOnce(t, ts.clients(t, producers), rounds, func(ci, r int) []protocol.PushItem {
		items := make([]protocol.PushItem, perRound)
		for i := range items {
			k := (i + ci*perRound/producers) % perRound // each starts elsewhere in the round's names
			if ci%2 == 1 {
				k = perRound - 1 - k
			}
			items[i] = item(t, "q", fmt.Sprintf("r%d-p%02d", r, k), fmt.Sprintf("c%d-r%d-p%d", ci, r, k), r)
		}
		return items
	}, nil)
	for g := range groups {
		mustPop(t, consumer, protocol.PopArgs{Queue: "q", Group: fmt.Sprintf("g%d", g), Batch: 1})
	}
	wait()
	var parts, cursors, missing int
	if err := ts.pool.QueryRow(testContext(t), `
		SELECT (SELECT count(*) FROM queenside.partitions),
		       (SELECT count(*) FROM queenside.cursors),
		       (SELECT count(*) FROM queenside.partitions p CROSS JOIN queenside.groups g
		         WHERE NOT EXISTS (SELECT 1 FROM queenside.cursors c WHERE c.partition_id = p.id AND c.group_id = g.id))`,
	).Scan(&parts, &cursors, &missing); err != nil {
		t.Fatal(err)
	}
	if parts != rounds*perRound || cursors != parts*groups || missing != 0 {
		t.Fatalf("%d partitions, %d cursors, %d (partition, group) without one; want %d, %d, 0",
			parts, cursors, missing, rounds*perRound, rounds*perRound*groups)
	}
}
