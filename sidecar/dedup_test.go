package sidecar

import (
	"crypto/sha256"
	"fmt"
	"github.com/jackc/pgx/v5/pgxpool"
	"sync"
	"testing"
	"time"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/store"
)

func TestDuplicateAnswersTheOriginalAndWritesNothing(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	first := mustPush(t, c, item(t, "q", "p", "tx-1", "first"))[0]
	if first.Status != protocol.StatusQueued || *first.Offset != 0 {
		t.Fatalf("first push: %+v", first)
	}
	again := mustPush(t, c, item(t, "q", "p", "tx-1", "second"))[0]
	if again.Status != protocol.StatusDuplicate {
		t.Fatalf("repeat: status %s, want duplicate", again.Status)
	}
	if again.MessageID != first.MessageID || *again.Offset != *first.Offset {
		t.Fatalf("duplicate names %s@%d, original is %s@%d", again.MessageID, *again.Offset, first.MessageID, *first.Offset)
	}
	// No row written and no offset consumed: the next message gets offset 1.
	next := mustPush(t, c, item(t, "q", "p", "tx-2", "third"))[0]
	if *next.Offset != 1 {
		t.Fatalf("next message got offset %d, want 1: the duplicate consumed an offset", *next.Offset)
	}
	msgs := checkGapless(t, storedMessages(t, ts.pool, "q", "p"), 2)
	if got := msgs["tx-1"].Payload; string(got) != string(item(t, "q", "p", "", "first").Payload) {
		t.Fatalf("tx-1 holds %x: the duplicate overwrote the original", got)
	}
}

func TestDuplicateRaceHasOneWinner(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	a, b := ts.client(t), ts.client(t)
	for round := 0; round < 50; round++ {
		tx := fmt.Sprintf("race-%d", round)
		var wg sync.WaitGroup
		results := make([]protocol.PushResult, 2)
		start := make(chan struct{})
		for i, c := range []*queenside.Client{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				res, err := c.Push(testContext(t), item(t, "race", "p", tx, i))
				if err != nil {
					t.Error(err)
					return
				}
				results[i] = res[0]
			}()
		}
		close(start)
		wg.Wait()
		queued := 0
		for _, r := range results {
			if r.Status == protocol.StatusQueued {
				queued++
			}
		}
		if queued != 1 || results[0].MessageID != results[1].MessageID {
			t.Fatalf("round %d: %d queued, messageIds %s and %s; want exactly one queued and one duplicate of it",
				round, queued, results[0].MessageID, results[1].MessageID)
		}
	}
	checkGapless(t, storedMessages(t, ts.pool, "race", "p"), 50)
	checkOneDedupRowPerHash(t, ts.pool)
}

func TestRepeatInsideOneRequestFirstWins(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	res := mustPush(t, c,
		item(t, "q", "p", "A", 1), item(t, "q", "p", "B", 2), item(t, "q", "p", "A", 3), item(t, "q", "p", "A", 4))
	want := []string{protocol.StatusQueued, protocol.StatusQueued, protocol.StatusDuplicate, protocol.StatusDuplicate}
	for i, r := range res {
		if r.Status != want[i] {
			t.Fatalf("item %d: %s, want %s", i, r.Status, want[i])
		}
	}
	for _, i := range []int{2, 3} {
		if res[i].MessageID != res[0].MessageID || *res[i].Offset != *res[0].Offset {
			t.Fatalf("repeat %d names %s@%d, leader is %s@%d", i, res[i].MessageID, *res[i].Offset, res[0].MessageID, *res[0].Offset)
		}
	}
	msgs := checkGapless(t, storedMessages(t, ts.pool, "q", "p"), 2)
	if string(msgs["A"].Payload) != string(item(t, "q", "p", "", 1).Payload) {
		t.Fatal("the first occurrence of A did not win")
	}
	checkOneDedupRowPerHash(t, ts.pool)
}

func TestSameTransactionIDInTwoPartitionsIsTwoMessages(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	res := mustPush(t, c, item(t, "q", "p1", "same", 1), item(t, "q", "p2", "same", 2))
	for _, r := range res {
		if r.Status != protocol.StatusQueued {
			t.Fatalf("%s: %s, want queued", r.Partition, r.Status)
		}
	}
	checkGapless(t, storedMessages(t, ts.pool, "q", "p1"), 1)
	checkGapless(t, storedMessages(t, ts.pool, "q", "p2"), 1)
}

func TestDedupWindowZeroStoresRepeats(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	configure(t, c, "off", func(o *protocol.QueueOptions) { o.DedupWindowSeconds = 0 })
	mustPush(t, c, item(t, "off", "p", "same", 1))
	res := mustPush(t, c, item(t, "off", "p", "same", 2), item(t, "off", "p", "same", 3))
	for _, r := range res {
		if r.Status != protocol.StatusQueued {
			t.Fatalf("with deduplication off a repeat was %s", r.Status)
		}
	}
	msgs := storedMessages(t, ts.pool, "off", "p")
	if len(msgs) != 3 {
		t.Fatalf("stored %d messages, want all 3 repeats", len(msgs))
	}
	checkOneDedupRowPerHash(t, ts.pool)
}

func TestRepeatAfterTheWindowIsNew(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	configure(t, c, "short", func(o *protocol.QueueOptions) { o.DedupWindowSeconds = 1 })
	first := mustPush(t, c, item(t, "short", "p", "tx", 1))[0]
	if r := mustPush(t, c, item(t, "short", "p", "tx", 2))[0]; r.Status != protocol.StatusDuplicate {
		t.Fatalf("inside the window: %s, want duplicate", r.Status)
	}
	time.Sleep(time.Until(first.CommittedAt.Add(1100 * time.Millisecond)))
	late := mustPush(t, c, item(t, "short", "p", "tx", 3))[0]
	if late.Status != protocol.StatusQueued || *late.Offset != 1 {
		t.Fatalf("after the window: %s at offset %v, want queued at 1", late.Status, late.Offset)
	}
	// The hash now names the new message: a repeat is its duplicate.
	if r := mustPush(t, c, item(t, "short", "p", "tx", 4))[0]; r.Status != protocol.StatusDuplicate || r.MessageID != late.MessageID {
		t.Fatalf("repeat of the new message: %s %s, want duplicate of %s", r.Status, r.MessageID, late.MessageID)
	}
	checkOneDedupRowPerHash(t, ts.pool)
}

func TestConfigureWithoutWindowRestoresDefault(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	ctx := testContext(t)
	opts := protocol.DefaultQueueOptions()
	opts.DedupWindowSeconds = 0
	if _, err := c.Configure(ctx, "q", opts); err != nil {
		t.Fatal(err)
	}
	// Omit every option on the wire: each returns to its default.
	var res protocol.ConfigureResult
	if err := c.Call(ctx, protocol.OpConfigure, map[string]any{"queue": "q", "options": map[string]any{"retryLimit": 5}}, &res); err != nil {
		t.Fatal(err)
	}
	want := protocol.DefaultQueueOptions()
	want.RetryLimit = 5
	if res.Options != want {
		t.Fatalf("options now %+v, want %+v", res.Options, want)
	}
	mustPush(t, c, item(t, "q", "p", "tx", 1))
	if r := mustPush(t, c, item(t, "q", "p", "tx", 2))[0]; r.Status != protocol.StatusDuplicate {
		t.Fatalf("after configure restored the window, a repeat was %s", r.Status)
	}
}

func TestIdentityIsTheStored128BitHash(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	configure(t, c, "off", func(o *protocol.QueueOptions) { o.DedupWindowSeconds = 0 })
	for _, q := range []string{"on", "off"} {
		mustPush(t, c, item(t, q, "p", "identity-"+q, 1))
		sum := sha256.Sum256([]byte("identity-" + q))
		var stored [16]byte
		var offset int64
		err := ts.pool.QueryRow(testContext(t), `
			SELECT k.hash, k.msg_offset
			  FROM (SELECT d.partition_id, d.hash, d.msg_offset FROM queenside.dedup d
			        UNION ALL
			        SELECT s.partition_id, s.hash, s.last_offset FROM queenside.segments s WHERE s.hash IS NOT NULL) k
			  JOIN queenside.partitions p ON p.id = k.partition_id
			  JOIN queenside.queues q ON q.id = p.queue_id
			 WHERE q.name = $1`, q).Scan(&stored, &offset)
		if err != nil {
			t.Fatalf("queue %s: no hash row: %v", q, err)
		}
		if stored != [16]byte(sum[:16]) || offset != 0 {
			t.Fatalf("queue %s: stored hash %x at %d, want %x at 0", q, stored, offset, sum[:16])
		}
	}
}

// A batch mixing new messages with a duplicate: the new ones take the next
// offsets without a gap, and their hashes name those offsets.
func TestDuplicateInsideABatchLeavesNoGap(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	orig := mustPush(t, c, item(t, "q", "p", "A", 1), item(t, "q", "p", "B", 2))
	res := mustPush(t, c, item(t, "q", "p", "C", 3), item(t, "q", "p", "A", 4), item(t, "q", "p", "D", 5), item(t, "q", "p", "C", 6))
	want := []struct {
		status string
		offset int64
	}{{protocol.StatusQueued, 2}, {protocol.StatusDuplicate, 0}, {protocol.StatusQueued, 3}, {protocol.StatusDuplicate, 2}}
	for i, w := range want {
		if res[i].Status != w.status || *res[i].Offset != w.offset {
			t.Fatalf("item %d: %s at %d, want %s at %d", i, res[i].Status, *res[i].Offset, w.status, w.offset)
		}
	}
	if res[1].MessageID != orig[0].MessageID || !res[1].CommittedAt.Equal(orig[0].CommittedAt) || res[3].MessageID != res[0].MessageID {
		t.Fatalf("duplicates name %s and %s, want %s and %s", res[1].MessageID, res[3].MessageID, orig[0].MessageID, res[0].MessageID)
	}
	msgs := checkGapless(t, storedMessages(t, ts.pool, "q", "p"), 4)
	for tx, off := range map[string]int64{"A": 0, "B": 1, "C": 2, "D": 3} {
		if msgs[tx].Offset != off {
			t.Fatalf("%s stored at %d, want %d", tx, msgs[tx].Offset, off)
		}
		var hashOffset int64
		if err := ts.pool.QueryRow(testContext(t), "SELECT msg_offset FROM queenside.dedup WHERE hash = $1",
			[16]byte(store.TransactionHash(tx))).Scan(&hashOffset); err != nil || hashOffset != off {
			t.Fatalf("the hash of %s names offset %d (%v), want %d", tx, hashOffset, err, off)
		}
	}
}

// One request across partitions and queues with different windows: each
// partition follows its own queue's rule, and offsets stay gapless in each.
func TestMixedRequestAcrossPartitionsAndWindows(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	configure(t, c, "off", func(o *protocol.QueueOptions) { o.DedupWindowSeconds = 0 })
	first := mustPush(t, c, item(t, "q", "p1", "A", 0))[0]
	res := mustPush(t, c,
		item(t, "q", "p1", "A", 1),  // stored already: duplicate
		item(t, "q", "p2", "X", 2),  // new
		item(t, "off", "p", "X", 3), // new
		item(t, "off", "p", "X", 4), // repeat, but deduplication is off: stored
		item(t, "q", "p2", "X", 5),  // repeat inside the request: duplicate of item 1
		item(t, "q", "p1", "B", 6),  // new, after the duplicate: no gap
	)
	want := []struct {
		status string
		offset int64
	}{
		{protocol.StatusDuplicate, 0}, {protocol.StatusQueued, 0}, {protocol.StatusQueued, 0},
		{protocol.StatusQueued, 1}, {protocol.StatusDuplicate, 0}, {protocol.StatusQueued, 1},
	}
	for i, w := range want {
		if res[i].Status != w.status || *res[i].Offset != w.offset {
			t.Fatalf("item %d: %s at %d, want %s at %d", i, res[i].Status, *res[i].Offset, w.status, w.offset)
		}
	}
	if res[0].MessageID != first.MessageID || res[4].MessageID != res[1].MessageID {
		t.Fatal("duplicates do not name their originals")
	}
	checkGapless(t, storedMessages(t, ts.pool, "q", "p1"), 2)
	checkGapless(t, storedMessages(t, ts.pool, "q", "p2"), 1)
	if n := len(storedMessages(t, ts.pool, "off", "p")); n != 2 {
		t.Fatalf("the queue without deduplication stored %d, want both", n)
	}
	checkOneDedupRowPerHash(t, ts.pool)
}

// checkOneDedupRowPerHash fails the test when a partition holds two dedup
// rows for one hash, or one message's hash in both places. No index
// enforces it: the partition row lock that every push holds while it
// probes and writes its hashes does.
func checkOneDedupRowPerHash(t testing.TB, pool *pgxpool.Pool) {
	t.Helper()
	// A hash is kept in a dedup row or in the segment of one message that
	// holds it: some are kept, a dedup row is never repeated, and no
	// message has its hash in both places.
	var kept, repeated, twice int
	err := pool.QueryRow(testContext(t), `
		SELECT (SELECT count(*) FROM queenside.dedup) + (SELECT count(*) FROM queenside.segments WHERE hash IS NOT NULL),
		       (SELECT count(*) FROM (SELECT 1 FROM queenside.dedup GROUP BY partition_id, hash HAVING count(*) > 1) r),
		       (SELECT count(*) FROM queenside.dedup d JOIN queenside.segments s
		            ON s.partition_id = d.partition_id AND s.hash = d.hash AND s.last_offset = d.msg_offset)`).Scan(&kept, &repeated, &twice)
	if err != nil {
		t.Fatal(err)
	}
	if kept == 0 || repeated != 0 || twice != 0 {
		t.Fatalf("%d hashes kept, %d of a partition in dedup more than once, %d in both places", kept, repeated, twice)
	}
}
