package sidecar

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/store"
)

// pushN pushes n messages to one partition with transaction ids tx-<prefix>-i.
func pushN(t testing.TB, c *queenside.Client, queue, partition, prefix string, n int) {
	t.Helper()
	for start := 0; start < n; start += 500 {
		var items []protocol.PushItem
		for i := start; i < min(n, start+500); i++ {
			items = append(items, item(t, queue, partition, fmt.Sprintf("tx-%s-%d", prefix, i), i))
		}
		mustPush(t, c, items...)
	}
}

func mustPop(t testing.TB, c *queenside.Client, args protocol.PopArgs) protocol.PopResult {
	t.Helper()
	res, err := c.Pop(testContext(t), args)
	if err != nil {
		t.Fatalf("pop: %v", err)
	}
	return res
}

func mustAck(t testing.TB, c *queenside.Client, items ...protocol.AckItem) protocol.AckResult {
	t.Helper()
	res, err := c.Ack(testContext(t), items...)
	if err != nil {
		t.Fatalf("ack: %v", err)
	}
	return res
}

func offsets(msgs []protocol.Message) []int64 {
	out := make([]int64, len(msgs))
	for i, m := range msgs {
		out[i] = m.Offset
	}
	return out
}

func wantOffsets(t testing.TB, msgs []protocol.Message, from, to int64) {
	t.Helper()
	got := offsets(msgs)
	if len(got) != int(to-from+1) {
		t.Fatalf("got offsets %v, want %d..%d", got, from, to)
	}
	for i, o := range got {
		if o != from+int64(i) {
			t.Fatalf("got offsets %v, want %d..%d", got, from, to)
		}
	}
}

// cursorOf reads a group's committed cursor in a partition from stats.
func cursorOf(t testing.TB, c *queenside.Client, queue, partition, group string) (int64, bool) {
	t.Helper()
	st, err := c.Stats(testContext(t), queue)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range st.Partitions {
		if p.Partition != partition {
			continue
		}
		for _, g := range p.Groups {
			if g.Group == group {
				return g.Cursor, g.Leased
			}
		}
	}
	t.Fatalf("no cursor for group %q in %s/%s", group, queue, partition)
	return 0, false
}

func TestEightConsumersOfOneGroupOnTwentyPartitions(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	producer := ts.client(t)
	const partitions, perPartition = 20, 500
	for p := 0; p < partitions; p++ {
		pushN(t, producer, "work", fmt.Sprintf("p%02d", p), fmt.Sprint(p), perPartition)
	}
	var (
		mu        sync.Mutex
		delivered = map[string][]int64{} // per partition, in delivery order
		held      = map[string]*atomic.Bool{}
		total     atomic.Int64
	)
	for p := 0; p < partitions; p++ {
		held[fmt.Sprintf("p%02d", p)] = &atomic.Bool{}
	}
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		c := ts.client(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for total.Load() < partitions*perPartition {
				res, err := c.Pop(testContext(t), protocol.PopArgs{Queue: "work", Group: "g", Batch: 37, Partitions: 3, WaitMs: 200})
				if err != nil {
					t.Error(err)
					return
				}
				var acks []protocol.AckItem
				for _, l := range res.Leases {
					if !held[l.Partition].CompareAndSwap(false, true) {
						t.Errorf("partition %s leased twice at once", l.Partition)
					}
				}
				mu.Lock()
				for _, m := range res.Messages {
					delivered[m.Partition] = append(delivered[m.Partition], m.Offset)
					acks = append(acks, queenside.Completed(m))
				}
				mu.Unlock()
				total.Add(int64(len(res.Messages)))
				// Free the partitions before the ack commits: until it does,
				// the lease is live and no one else may get them.
				for _, l := range res.Leases {
					held[l.Partition].Store(false)
				}
				if len(acks) > 0 {
					ar, err := c.Ack(testContext(t), acks...)
					if err != nil {
						t.Error(err)
						return
					}
					for _, l := range ar.Leases {
						if !l.Released {
							t.Errorf("fully acked lease %s not released", l.LeaseID)
						}
					}
				}
			}
		}()
	}
	wg.Wait()
	for p, offs := range delivered {
		if len(offs) != perPartition {
			t.Fatalf("%s: %d deliveries, want %d", p, len(offs), perPartition)
		}
		for i, o := range offs {
			if o != int64(i) {
				t.Fatalf("%s: delivery %d was offset %d: order broken or duplicated", p, i, o)
			}
		}
	}
	if len(delivered) != partitions {
		t.Fatalf("%d partitions delivered, want %d", len(delivered), partitions)
	}
}

// drain pops (auto-ack) everything a group can see, in order of delivery.
func drain(t testing.TB, c *queenside.Client, queue, group string) []protocol.Message {
	t.Helper()
	var all []protocol.Message
	for {
		res := mustPop(t, c, protocol.PopArgs{Queue: queue, Group: group, Batch: 100, Partitions: 10, AutoAck: true})
		if len(res.Messages) == 0 {
			return all
		}
		if len(res.Leases) != 0 || res.Messages[0].LeaseID != "" {
			t.Fatalf("auto-ack pop returned leases: %+v", res.Leases)
		}
		all = append(all, res.Messages...)
	}
}

func TestEveryGroupSeesEveryMessage(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	for p := 0; p < 3; p++ {
		pushN(t, c, "fan", fmt.Sprintf("p%d", p), fmt.Sprint(p), 40)
	}
	for _, group := range []string{"billing", "audit", ""} { // "" is queue mode
		got := drain(t, c, "fan", group)
		if len(got) != 120 {
			t.Fatalf("group %q got %d messages, want 120", group, len(got))
		}
		seen := map[string]bool{}
		for _, m := range got {
			seen[m.TransactionID] = true
		}
		if len(seen) != 120 {
			t.Fatalf("group %q got %d distinct messages", group, len(seen))
		}
	}
}

func TestLeaseExpiryRedeliversTheWholeSpan(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	pushN(t, c, "q", "p", "x", 8)
	first := mustPop(t, c, protocol.PopArgs{Queue: "q", Batch: 5, LeaseSeconds: 1})
	wantOffsets(t, first.Messages, 0, 4)
	if l := first.Leases[0]; l.HeadAttempts != 1 || l.FromOffset != 0 || l.ToOffset != 4 || first.Messages[0].Redelivered {
		t.Fatalf("first delivery: lease %+v redelivered=%t", l, first.Messages[0].Redelivered)
	}
	// Acknowledge one message: the rest of the span stays unacked.
	mustAck(t, c, queenside.Completed(first.Messages[0]))
	if again := mustPop(t, c, protocol.PopArgs{Queue: "q", Batch: 5}); len(again.Messages) != 0 {
		t.Fatalf("a live lease's partition was delivered again: %v", offsets(again.Messages))
	}
	time.Sleep(time.Until(first.Leases[0].ExpiresAt) + 50*time.Millisecond)
	second := mustPop(t, c, protocol.PopArgs{Queue: "q", Batch: 4})
	wantOffsets(t, second.Messages, 1, 4)
	for _, m := range second.Messages {
		if !m.Redelivered {
			t.Fatalf("offset %d not marked redelivered", m.Offset)
		}
	}
	if l := second.Leases[0]; l.HeadAttempts != 2 {
		t.Fatalf("headAttempts %d after one expiry, want 2", l.HeadAttempts)
	}
}

func TestNackRewindsToTheLowestFailure(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	pushN(t, c, "q", "p", "x", 10)
	res := mustPop(t, c, protocol.PopArgs{Queue: "q", Batch: 10})
	wantOffsets(t, res.Messages, 0, 9)
	var items []protocol.AckItem
	for _, m := range res.Messages {
		if m.Offset == 4 {
			items = append(items, queenside.Failed(m, "boom"))
		} else {
			items = append(items, queenside.Completed(m))
		}
	}
	ar := mustAck(t, c, items...)
	for i, r := range ar.Results {
		wantOK, wantCode := i <= 4, ""
		if i > 4 {
			wantCode = protocol.ItemRewound
		}
		if r.Success != wantOK || r.Code != wantCode || r.DeadLettered {
			t.Fatalf("item %d: %+v, want success=%t code=%q", i, r, wantOK, wantCode)
		}
	}
	if l := ar.Leases[0]; !l.Released || l.Cursor != 4 {
		t.Fatalf("lease after the nack: %+v, want released with cursor 4", l)
	}
	next := mustPop(t, c, protocol.PopArgs{Queue: "q", Batch: 10})
	wantOffsets(t, next.Messages, 4, 9)
	if next.Leases[0].HeadAttempts != 2 || !next.Messages[0].Redelivered {
		t.Fatalf("after the rewind: lease %+v", next.Leases[0])
	}
}

func TestCompletionsOutOfOrderInsideALease(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	pushN(t, c, "q", "p", "x", 3)
	res := mustPop(t, c, protocol.PopArgs{Queue: "q", Batch: 3})
	steps := []struct {
		offset   int
		cursor   int64
		released bool
	}{{2, 0, false}, {0, 1, false}, {1, 3, true}}
	for _, s := range steps {
		ar := mustAck(t, c, queenside.Completed(res.Messages[s.offset]))
		if !ar.Results[0].Success {
			t.Fatalf("ack %d: %+v", s.offset, ar.Results[0])
		}
		if l := ar.Leases[0]; l.Cursor != s.cursor || l.Released != s.released {
			t.Fatalf("after acking %d: %+v, want cursor %d released=%t", s.offset, l, s.cursor, s.released)
		}
	}
}

func TestRetryBudgetDeadLettersTheHead(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	configure(t, c, "q", func(o *protocol.QueueOptions) { o.RetryLimit = 2 })
	pushN(t, c, "q", "p", "x", 3)
	for attempt := 1; attempt <= 3; attempt++ {
		res := mustPop(t, c, protocol.PopArgs{Queue: "q", Group: "g", Batch: 2})
		wantOffsets(t, res.Messages, 0, 1)
		if res.Leases[0].HeadAttempts != attempt {
			t.Fatalf("attempt %d: headAttempts %d", attempt, res.Leases[0].HeadAttempts)
		}
		ar := mustAck(t, c, queenside.Failed(res.Messages[0], fmt.Sprintf("failure %d", attempt)), queenside.Completed(res.Messages[1]))
		dead := attempt == 3
		if !ar.Results[0].Success || ar.Results[0].DeadLettered != dead || ar.Results[1].Code != protocol.ItemRewound {
			t.Fatalf("attempt %d: %+v", attempt, ar.Results)
		}
		wantCursor := int64(0)
		if dead {
			wantCursor = 1
		}
		if ar.Leases[0].Cursor != wantCursor {
			t.Fatalf("attempt %d: cursor %d, want %d", attempt, ar.Leases[0].Cursor, wantCursor)
		}
	}
	// The cursor passed the dead message; the next ones are delivered.
	res := mustPop(t, c, protocol.PopArgs{Queue: "q", Group: "g", Batch: 10})
	wantOffsets(t, res.Messages, 1, 2)
	var (
		offset         int64
		failures       int
		errText, group string
		payload        []byte
	)
	err := ts.pool.QueryRow(testContext(t), `SELECT msg_offset, failures, error, group_name, payload FROM queenside.dead_letters`).
		Scan(&offset, &failures, &errText, &group, &payload)
	if err != nil || offset != 0 || failures != 3 || errText != "failure 3" || group != "g" ||
		string(payload) != string(item(t, "q", "p", "", 0).Payload) {
		t.Fatalf("dead letter: offset %d failures %d error %q group %q payload %x (%v)", offset, failures, errText, group, payload, err)
	}
}

func TestCrashesDoNotChargeTheRetryBudget(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	configure(t, c, "q", func(o *protocol.QueueOptions) { o.RetryLimit = 0 }) // a single explicit failure would dead-letter
	pushN(t, c, "q", "p", "x", 2)
	for crash := 1; crash <= 3; crash++ {
		consumer := dialClient(t, ts.socket)
		res := mustPop(t, consumer, protocol.PopArgs{Queue: "q", Batch: 2, LeaseSeconds: 1})
		if res.Leases[0].HeadAttempts != crash {
			t.Fatalf("crash %d: headAttempts %d", crash, res.Leases[0].HeadAttempts)
		}
		consumer.Close() // dies mid-batch
		time.Sleep(time.Until(res.Leases[0].ExpiresAt) + 50*time.Millisecond)
	}
	res := mustPop(t, c, protocol.PopArgs{Queue: "q", Batch: 2})
	wantOffsets(t, res.Messages, 0, 1)
	if res.Leases[0].HeadAttempts != 4 {
		t.Fatalf("headAttempts %d, want 4", res.Leases[0].HeadAttempts)
	}
	var dead int
	if err := ts.pool.QueryRow(testContext(t), "SELECT count(*) FROM queenside.dead_letters").Scan(&dead); err != nil || dead != 0 {
		t.Fatalf("%d dead letters after crashes (%v), want 0", dead, err)
	}
}

func TestAutoAckMovesTheCursorWithTheRead(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	pushN(t, c, "q", "p", "x", 5)
	res := mustPop(t, c, protocol.PopArgs{Queue: "q", Group: "g", Batch: 3, AutoAck: true})
	wantOffsets(t, res.Messages, 0, 2)
	if len(res.Leases) != 0 {
		t.Fatalf("auto-ack made leases: %+v", res.Leases)
	}
	if cur, leased := cursorOf(t, c, "q", "p", "g"); cur != 3 || leased {
		t.Fatalf("cursor %d leased=%t after auto-ack, want 3 and no lease", cur, leased)
	}
	// The consumer "crashes" here; whoever comes next does not get 0..2 again.
	rest := mustPop(t, dialClient(t, ts.socket), protocol.PopArgs{Queue: "q", Group: "g", Batch: 10, AutoAck: true})
	wantOffsets(t, rest.Messages, 3, 4)
}

func TestAckByTransactionID(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	pushN(t, c, "q", "p", "x", 2)
	pushN(t, c, "q", "other", "elsewhere", 1)
	res := mustPop(t, c, protocol.PopArgs{Queue: "q", Partition: "p", Batch: 2})
	lease := res.Leases[0].LeaseID
	ar := mustAck(t, c,
		protocol.AckItem{LeaseID: lease, TransactionID: "tx-x-0"},
		protocol.AckItem{LeaseID: lease, TransactionID: "tx-elsewhere-0"}, // hash not in this partition
		protocol.AckItem{LeaseID: lease, TransactionID: "never-pushed"},
	)
	if !ar.Results[0].Success || ar.Results[1].Code != protocol.ItemUnresolvable || ar.Results[2].Code != protocol.ItemUnresolvable {
		t.Fatalf("results %+v", ar.Results)
	}
	// A hash older than the window it is kept for no longer resolves.
	if _, err := ts.pool.Exec(testContext(t), `UPDATE queenside.dedup SET committed_at = now() - interval '25 hours'
		WHERE hash = $1`, [16]byte(store.TransactionHash("tx-x-1"))); err != nil {
		t.Fatal(err)
	}
	if ar := mustAck(t, c, protocol.AckItem{LeaseID: lease, TransactionID: "tx-x-1"}); ar.Results[0].Code != protocol.ItemUnresolvable {
		t.Fatalf("ack by an id outside the window: %+v", ar.Results)
	}
	if l := ar.Leases[0]; l.Cursor != 1 || l.Released {
		t.Fatalf("lease %+v, want cursor 1 and still held", l)
	}
	// The unresolved message is delivered again once the lease is given back.
	if _, err := c.Release(testContext(t), lease); err != nil {
		t.Fatal(err)
	}
	again := mustPop(t, c, protocol.PopArgs{Queue: "q", Partition: "p", Batch: 2})
	wantOffsets(t, again.Messages, 1, 1)
}

func TestStaleLeaseCannotAck(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	first, second := ts.client(t), dialClient(t, ts.socket)
	pushN(t, first, "q", "p", "x", 3)
	old := mustPop(t, first, protocol.PopArgs{Queue: "q", Batch: 3, LeaseSeconds: 1})
	time.Sleep(time.Until(old.Leases[0].ExpiresAt) + 50*time.Millisecond)
	// Expired: rejected even before anyone else takes the partition.
	if ar := mustAck(t, first, queenside.Completed(old.Messages[0])); ar.Results[0].Code != protocol.ItemLeaseExpired {
		t.Fatalf("ack on an expired lease: %+v", ar.Results)
	}
	now := mustPop(t, second, protocol.PopArgs{Queue: "q", Batch: 3})
	wantOffsets(t, now.Messages, 0, 2)
	ar := mustAck(t, first, queenside.Completed(old.Messages[0]), queenside.Completed(old.Messages[1]))
	for _, r := range ar.Results {
		if r.Success || r.Code != protocol.ItemLeaseExpired {
			t.Fatalf("stale ack: %+v", ar.Results)
		}
	}
	if cur, leased := cursorOf(t, first, "q", "p", ""); cur != 0 || !leased {
		t.Fatalf("stale ack moved the cursor to %d (leased=%t)", cur, leased)
	}
	if ar := mustAck(t, second, queenside.Completed(now.Messages[0])); !ar.Results[0].Success || ar.Leases[0].Cursor != 1 {
		t.Fatalf("the live lease's ack: %+v %+v", ar.Results, ar.Leases)
	}
}

// An ack sent twice says so: the second answers already_acked, not
// lease_expired, whether the repeat names the message by offset or by
// transaction id, and whether the lease that settled it was this one or
// a later one; a message the cursor has not passed still answers
// lease_expired, and nothing moves.
func TestAckSentTwiceAnswersAlreadyAcked(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	first, second := ts.client(t), dialClient(t, ts.socket)
	pushN(t, first, "q", "p", "x", 4)
	res := mustPop(t, first, protocol.PopArgs{Queue: "q", Batch: 2})
	if ar := mustAck(t, first, queenside.Completed(res.Messages[0]), queenside.Completed(res.Messages[1])); !ar.Results[0].Success || !ar.Results[1].Success {
		t.Fatalf("first ack: %+v", ar.Results)
	}
	again := mustAck(t, first, queenside.Completed(res.Messages[0]),
		protocol.AckItem{LeaseID: res.Leases[0].LeaseID, TransactionID: "tx-x-1"})
	for _, r := range again.Results {
		if r.Success || r.Code != protocol.ItemAlreadyAcked {
			t.Fatalf("the same ack sent again: %+v, want already_acked", again.Results)
		}
	}
	if cur, _ := cursorOf(t, first, "q", "p", ""); cur != 2 {
		t.Fatalf("cursor %d after the repeat, want 2", cur)
	}

	// A lease that lapsed: the message another consumer completed since
	// is already acked, the one still ahead of the cursor is not.
	old := mustPop(t, first, protocol.PopArgs{Queue: "q", Batch: 2, LeaseSeconds: 1})
	time.Sleep(time.Until(old.Leases[0].ExpiresAt) + 50*time.Millisecond)
	now := mustPop(t, second, protocol.PopArgs{Queue: "q", Batch: 1})
	mustAck(t, second, queenside.Completed(now.Messages[0]))
	late := mustAck(t, first, queenside.Completed(old.Messages[0]), queenside.Completed(old.Messages[1]))
	if r := late.Results; r[0].Code != protocol.ItemAlreadyAcked || r[1].Code != protocol.ItemLeaseExpired || r[0].Success || r[1].Success {
		t.Fatalf("a lapsed lease's ack: %+v, want already_acked then lease_expired", r)
	}
	if cur, _ := cursorOf(t, first, "q", "p", ""); cur != 3 {
		t.Fatalf("cursor %d after the lapsed lease's ack, want 3", cur)
	}
}

func TestRenewAndRelease(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	pushN(t, c, "q", "p", "x", 2)
	res := mustPop(t, c, protocol.PopArgs{Queue: "q", Batch: 2, LeaseSeconds: 1})
	id := res.Leases[0].LeaseID
	rr, err := c.Renew(testContext(t), 30, id, "1.1.00000000000000000000000000000000", "garbage")
	if err != nil {
		t.Fatal(err)
	}
	if !rr[0].Success || rr[0].ExpiresAt == nil || rr[0].ExpiresAt.Before(time.Now().Add(25*time.Second)) {
		t.Fatalf("renew: %+v", rr[0])
	}
	if rr[1].Code != protocol.ItemLeaseExpired || rr[2].Code != protocol.ItemLeaseExpired {
		t.Fatalf("renew of unknown leases: %+v", rr[1:])
	}
	// An expiry never moves earlier.
	rr, _ = c.Renew(testContext(t), 1, id)
	if !rr[0].Success || rr[0].ExpiresAt.Before(time.Now().Add(25*time.Second)) {
		t.Fatalf("renew moved the expiry earlier: %+v", rr[0])
	}
	time.Sleep(1100 * time.Millisecond) // past the original expiry: still held
	if again := mustPop(t, c, protocol.PopArgs{Queue: "q", Batch: 2}); len(again.Messages) != 0 {
		t.Fatal("a renewed lease expired at its original time")
	}
	rel, err := c.Release(testContext(t), id)
	if err != nil || !rel[0].Success {
		t.Fatalf("release: %+v %v", rel, err)
	}
	again := mustPop(t, c, protocol.PopArgs{Queue: "q", Batch: 2})
	wantOffsets(t, again.Messages, 0, 1)
	if rel, _ := c.Release(testContext(t), id); rel[0].Success {
		t.Fatal("released a lease twice")
	}
}

func TestFailureAfterARememberedCompletionRewinds(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	pushN(t, c, "q", "p", "x", 5)
	res := mustPop(t, c, protocol.PopArgs{Queue: "q", Batch: 5})
	m := res.Messages
	mustAck(t, c, queenside.Completed(m[2])) // remembered past the gap
	ar := mustAck(t, c, queenside.Completed(m[0]), queenside.Completed(m[1]), queenside.Failed(m[2], "changed my mind"))
	if l := ar.Leases[0]; l.Cursor != 2 || !l.Released {
		t.Fatalf("lease %+v: the failure of 2 must clamp the cursor at 2", l)
	}
	next := mustPop(t, c, protocol.PopArgs{Queue: "q", Batch: 5})
	wantOffsets(t, next.Messages, 2, 4)
}

func TestPopNeverReturnsMoreThanAFrame(t *testing.T) {
	ts := startSidecar(t, "", Options{MaxFrameBytes: 8192})
	c := ts.client(t)
	big := string(make([]byte, 1500))
	var items []protocol.PushItem
	for i := 0; i < 12; i++ {
		items = append(items, item(t, "big", "p", fmt.Sprint(i), big))
	}
	mustPush(t, c, items[:4]...)
	mustPush(t, c, items[4:8]...)
	mustPush(t, c, items[8:]...)
	var got []int64
	for len(got) < 12 {
		res := mustPop(t, c, protocol.PopArgs{Queue: "big", Batch: 100, AutoAck: true})
		if len(res.Messages) == 0 || len(res.Messages) > 5 {
			t.Fatalf("pop of 1.5 kB messages under an 8 kB frame returned %d", len(res.Messages))
		}
		got = append(got, offsets(res.Messages)...)
	}
	for i, o := range got {
		if o != int64(i) {
			t.Fatalf("auto-acked offsets %v: a cut result lost or repeated messages", got)
		}
	}
	// A message that can never fit is refused, and nothing moves.
	mustPush(t, c, item(t, "huge", "p", "", string(make([]byte, 7000))))
	_, err := c.Pop(testContext(t), protocol.PopArgs{Queue: "huge", AutoAck: true})
	var qe *queenside.Error
	if !errors.As(err, &qe) || qe.Code != protocol.CodeOverloaded {
		t.Fatalf("pop of a message larger than the frame: %v, want overloaded", err)
	}
	if cur, _ := cursorOf(t, c, "huge", "p", ""); cur != 0 {
		t.Fatalf("the refused pop moved the cursor to %d", cur)
	}
}

func TestAckErrorTextMustBeText(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	pushN(t, c, "q", "p", "x", 1)
	m := mustPop(t, c, protocol.PopArgs{Queue: "q"}).Messages[0]
	_, err := c.Ack(testContext(t), queenside.Failed(m, "bad \xff byte"))
	var qe *queenside.Error
	if !errors.As(err, &qe) || qe.Code != protocol.CodeInvalidArgument {
		t.Fatalf("ack with invalid UTF-8 in error: %v, want invalid_argument", err)
	}
	long := strings.Repeat("é", protocol.MaxErrorBytes) // two bytes each: the cut falls mid-character
	if ar := mustAck(t, c, queenside.Failed(m, long)); !ar.Results[0].Success {
		t.Fatalf("long error text: %+v", ar.Results)
	}
}

// Everything a push carries comes back from pop as it went in, whether a
// pop takes whole segments or parts of them.
func TestPopReturnsWhatWasPushed(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	var sent []protocol.PushItem
	for i := 0; i < 7; i++ {
		it := item(t, "rt", "p", fmt.Sprintf("tx-%d", i), map[string]any{"n": i, "s": strings.Repeat("x", i)})
		if i%2 == 0 {
			it.TraceID = fmt.Sprintf("trace-%d", i)
		}
		if i%3 == 0 {
			it.Headers = map[string]string{"k": fmt.Sprint(i), "kind": "test"}
		}
		sent = append(sent, it)
	}
	mustPush(t, c, sent[:3]...)
	mustPush(t, c, sent[3:]...)
	var got []protocol.Message
	for _, batch := range []int{2, 3, 10} { // cuts through the first segment, then the second
		got = append(got, mustPop(t, c, protocol.PopArgs{Queue: "rt", Batch: batch, AutoAck: true}).Messages...)
	}
	if len(got) != len(sent) {
		t.Fatalf("popped %d of %d", len(got), len(sent))
	}
	for i, m := range got {
		s := sent[i]
		if m.Offset != int64(i) || m.TransactionID != s.TransactionID || string(m.Payload) != string(s.Payload) ||
			m.TraceID != s.TraceID || fmt.Sprint(m.Headers) != fmt.Sprint(s.Headers) {
			t.Fatalf("offset %d came back as %+v, sent %+v", i, m, s)
		}
	}
}

// A push over many partitions stores each partition's messages as they
// went in, whether each partition gets one message of the call (the
// segments are built from single elements) or a run of several.
func TestPushOverManyPartitionsKeepsEveryField(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	for _, perPartition := range []int{1, 3} {
		queue := fmt.Sprintf("spread-%d", perPartition)
		var sent []protocol.PushItem
		for i := 0; i < 6*perPartition; i++ {
			it := item(t, queue, fmt.Sprintf("p%d", i%6), fmt.Sprintf("tx-%d", i), map[string]any{"n": i})
			if i%2 == 0 {
				it.TraceID = fmt.Sprintf("trace-%d", i)
			}
			if i%3 == 0 {
				it.Headers = map[string]string{"k": fmt.Sprint(i)}
			}
			sent = append(sent, it)
		}
		mustPush(t, c, sent...)
		for p := 0; p < 6; p++ {
			got := mustPop(t, c, protocol.PopArgs{Queue: queue, Partition: fmt.Sprintf("p%d", p), Batch: 10, AutoAck: true}).Messages
			if len(got) != perPartition {
				t.Fatalf("%s p%d: popped %d, want %d", queue, p, len(got), perPartition)
			}
			for k, m := range got {
				s := sent[p+6*k]
				if m.Offset != int64(k) || m.TransactionID != s.TransactionID || string(m.Payload) != string(s.Payload) ||
					m.TraceID != s.TraceID || fmt.Sprint(m.Headers) != fmt.Sprint(s.Headers) {
					t.Fatalf("%s p%d offset %d came back as %+v, sent %+v", queue, p, k, m, s)
				}
			}
		}
	}
}

// Failing a message the cursor already passed comes too late: it changes
// nothing (no rewind, no release, no charge) and the item says so.
func TestFailureBelowTheCursorChangesNothing(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	pushN(t, c, "q", "p", "x", 3)
	m := mustPop(t, c, protocol.PopArgs{Queue: "q", Batch: 3}).Messages
	mustAck(t, c, queenside.Completed(m[0]))
	ar := mustAck(t, c, queenside.Failed(m[0], "too late"), queenside.Completed(m[2]))
	if ar.Results[0].Success || ar.Results[0].Code != protocol.ItemNotInLease || !ar.Results[1].Success {
		t.Fatalf("results %+v", ar.Results)
	}
	if l := ar.Leases[0]; l.Cursor != 1 || l.Released {
		t.Fatalf("lease %+v, want cursor 1 and still held", l)
	}
	ar = mustAck(t, c, queenside.Completed(m[1]))
	if l := ar.Leases[0]; l.Cursor != 3 || !l.Released {
		t.Fatalf("lease %+v, want cursor 3 and released: the completion of 2 was kept", l)
	}
}

// One ack call over several leases answers each as if it were acked alone:
// whole leases (moved past in one update), a failure, an item named by
// transaction id, a partial ack, a repeated item and an unknown lease.
func TestAckCallOverManyLeasesAnswersEachOnItsOwn(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	for p := 0; p < 5; p++ {
		pushN(t, c, "many", fmt.Sprintf("p%d", p), fmt.Sprintf("m%d", p), 5)
	}
	// One pop takes them all; on Citus a pop takes one shard's, and the
	// leases of the ack call below lie on several shards.
	byPartition := map[string][]protocol.Message{}
	for got := 0; got < 25; {
		res := mustPop(t, c, protocol.PopArgs{Queue: "many", Batch: 25 - got, Partitions: 5})
		if len(res.Messages) == 0 {
			break
		}
		for _, m := range res.Messages {
			byPartition[m.Partition] = append(byPartition[m.Partition], m)
		}
		got += len(res.Messages)
	}
	for p := 0; p < 5; p++ {
		if n := len(byPartition[fmt.Sprintf("p%d", p)]); n != 5 {
			t.Fatalf("p%d: leased %d messages, want 5", p, n)
		}
	}
	p0, p1, p2, p3, p4 := byPartition["p0"], byPartition["p1"], byPartition["p2"], byPartition["p3"], byPartition["p4"]
	// A lease id of p0's cursor that was never handed out.
	stale := p0[0].LeaseID[:strings.LastIndex(p0[0].LeaseID, ".")+1] + strings.Repeat("0", 32)
	byTxid := queenside.AckItem{LeaseID: p2[3].LeaseID, TransactionID: p2[3].TransactionID, Status: protocol.AckCompleted}
	items := []protocol.AckItem{
		queenside.Completed(p3[0]), queenside.Completed(p3[1]), queenside.Completed(p3[2]), // 0-2: partial
		queenside.Completed(p1[0]), queenside.Completed(p1[1]), queenside.Failed(p1[2], "boom"), // 3-5
		queenside.Completed(p1[3]), queenside.Completed(p1[4]), // 6-7: rewound
		{LeaseID: stale, Offset: &p0[0].Offset, Status: protocol.AckCompleted}, // 8
		byTxid, // 9
	}
	for _, m := range p0 {
		items = append(items, queenside.Completed(m)) // 10-14: whole
	}
	items = append(items, queenside.Completed(p0[0])) // 15: repeated
	for _, k := range []int{0, 1, 2, 4} {
		items = append(items, queenside.Completed(p2[k])) // 16-19, with 9: whole
	}
	for _, m := range p4[2:] {
		items = append(items, queenside.Completed(m)) // 20-22: to the end, but past a gap
	}
	ar := mustAck(t, c, items...)
	for i, r := range ar.Results {
		want, code := true, ""
		switch i {
		case 6, 7:
			want, code = false, protocol.ItemRewound
		case 8: // not live, and its message completed by items 10-14 first
			want, code = false, protocol.ItemAlreadyAcked
		}
		if r.Index != i || r.Success != want || r.Code != code || r.DeadLettered {
			t.Fatalf("item %d: %+v, want success %v code %q", i, r, want, code)
		}
	}
	leases := map[string]protocol.LeaseState{}
	for _, l := range ar.Leases {
		leases[l.LeaseID] = l
	}
	for _, w := range []struct {
		lease    string
		cursor   int64
		released bool
	}{{p0[0].LeaseID, 5, true}, {p1[0].LeaseID, 2, true}, {p2[0].LeaseID, 5, true}, {p3[0].LeaseID, 3, false},
		{p4[0].LeaseID, 0, false}, {items[8].LeaseID, 5, false}} { // names p0's cursor: reported where it now stands

		if l, ok := leases[w.lease]; !ok || l.Cursor != w.cursor || l.Released != w.released {
			t.Fatalf("lease %s: %+v (reported %v), want cursor %d released %v", w.lease, l, ok, w.cursor, w.released)
		}
	}
	if len(ar.Leases) != 6 {
		t.Fatalf("%d lease states, want 6: %+v", len(ar.Leases), ar.Leases)
	}
	// p1 comes again from its failure; p3 and p4 are still leased; p0 and
	// p2 are done.
	again := mustPop(t, c, protocol.PopArgs{Queue: "many", Batch: 25, Partitions: 5}).Messages
	if len(again) != 3 || again[0].Partition != "p1" || again[0].Offset != 2 {
		t.Fatalf("popped again %+v, want p1 offsets 2-4", again)
	}
}

// An ack that moves a cursor to the end of its partition while a push to
// that partition is in flight (its transaction open, its message not yet
// visible) must leave the cursor where pop still looks: once the push
// commits, the next pop delivers its message. cursor_head tells the two
// cases apart by whether it can share-lock the partition row at once.
func TestCursorMovedToTheEndDuringAPushStillSeesIt(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	mustPush(t, c, item(t, "q", "p", "a", 0))
	first := mustPop(t, c, protocol.PopArgs{Queue: "q", Group: "g", Batch: 10})
	if len(first.Messages) != 1 {
		t.Fatalf("popped %d messages, want 1", len(first.Messages))
	}

	ctx := testContext(t)
	push, err := ts.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer push.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	var partition int64
	if err := push.QueryRow(ctx, `SELECT id FROM queenside.partitions WHERE name = 'p'`).Scan(&partition); err != nil {
		t.Fatal(err)
	}
	var base []int64
	if err := push.QueryRow(ctx, `SELECT bases FROM queenside.push(ARRAY[$1::bigint], '{1}', '{1}', '{1}',
		ARRAY[$2::uuid], NULL, ARRAY[gen_random_uuid()], '{b}', ARRAY['\x01'::bytea], NULL, NULL)`,
		partition, store.TransactionHash("b")).Scan(&base); err != nil || len(base) != 1 || base[0] != 1 {
		t.Fatalf("push in a transaction: bases %v, %v", base, err)
	}
	// The ack runs on another connection while the push is open.
	mustAck(t, c, queenside.Completed(first.Messages[0]))
	if err := push.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	next := mustPop(t, c, protocol.PopArgs{Queue: "q", Group: "g", Batch: 10})
	if len(next.Messages) != 1 || next.Messages[0].Offset != 1 || next.Messages[0].TransactionID != "b" {
		t.Fatalf("after the push committed, pop returned %+v, want offset 1 (b)", next.Messages)
	}
}
