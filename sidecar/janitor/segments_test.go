package janitor

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/pgtest"
	"github.com/queenside/queenside/sidecar/store"
)

// Consumed segments go once completed_retention_seconds passed, but only
// those every group has consumed: the slow group holds back the rest.
func TestCompletedRetentionWaitsForTheSlowestGroup(t *testing.T) {
	f := newFixture(t, options(func(o *protocol.QueueOptions) { o.CompletedRetentionSeconds = 60 }))
	f.pop("fast", "", 1, true) // both groups exist before the messages
	f.pop("slow", "", 1, true)
	for i := range 3 {
		f.push("p", fmt.Sprintf("s%d", i), 10) // segments 0..9, 10..19, 20..29
	}
	if got := offsets(f.pop("fast", "", 30, true)); len(got) != 30 {
		t.Fatalf("fast consumed %v", got)
	}
	if got := offsets(f.pop("slow", "", 10, true)); len(got) != 10 {
		t.Fatalf("slow consumed %v", got)
	}
	if r := f.round(); r.Segments != 0 {
		t.Fatalf("deleted %d segments younger than completed_retention_seconds", r.Segments)
	}
	f.backdate(2 * time.Minute)
	if r := f.round(); r.Segments != 1 || r.Messages != 10 {
		t.Fatalf("round deleted %d segments, %d messages; want the one both groups consumed", r.Segments, r.Messages)
	}
	if got, want := f.retained("p"), [][2]int64{{10, 19}, {20, 29}}; !slices.Equal(got, want) {
		t.Fatalf("retained %v, want %v: the slow group has not consumed them", got, want)
	}
	if r := f.round(); r.Segments != 0 {
		t.Fatalf("a second round deleted %d segments", r.Segments)
	}
	if got := offsets(f.pop("slow", "", 30, true)); len(got) != 20 || got[0] != 10 {
		t.Fatalf("slow then consumed %v, want 10..29", got)
	}
	if r := f.round(); r.Segments != 2 || r.Messages != 20 {
		t.Fatalf("once slow caught up the round deleted %d segments, %d messages", r.Segments, r.Messages)
	}
	p := f.stats("p")
	if p.HeadOffset != 30 || p.Messages != 0 || groupStats(t, p, "slow").Lag != 0 || groupStats(t, p, "fast").Lag != 0 {
		t.Fatalf("stats after everything was deleted: %+v", p)
	}
}

// A queue without groups has consumed nothing, and a group that has not
// read a message holds it: only retention_seconds deletes then.
func TestNothingConsumedIsKeptUnlessRetentionSecondsSays(t *testing.T) {
	f := newFixture(t, options(func(o *protocol.QueueOptions) { o.CompletedRetentionSeconds = 1 }))
	f.push("p", "a", 5)
	f.backdate(time.Hour)
	if r := f.round(); r.Segments != 0 {
		t.Fatalf("a queue without groups lost %d segments", r.Segments)
	}
	if f.count("SELECT o_group FROM queenside.ensure_group($1, 'idle', 'all', NULL)", f.queue) == 0 {
		t.Fatal("no group")
	}
	if r := f.round(); r.Segments != 0 {
		t.Fatalf("segments a group has not read were deleted: %d", r.Segments)
	}
	if _, err := f.st.Configure(f.ctx, f.queue, options(func(o *protocol.QueueOptions) {
		o.CompletedRetentionSeconds = 1
		o.RetentionSeconds = 1800
	})); err != nil {
		t.Fatal(err)
	}
	if r := f.round(); r.Segments != 1 || r.Messages != 5 {
		t.Fatalf("retention_seconds deleted %d segments, %d messages; want 1, 5", r.Segments, r.Messages)
	}
	if p := f.stats("p"); p.Messages != 0 || groupStats(t, p, "idle").Lag != 0 {
		t.Fatalf("stats %+v", p)
	}
}

// retention_seconds deletes old messages whoever has not read them; the
// slow group then goes on from the first message retained, with the right
// lag, and its lease and acks work as usual.
func TestRetentionSecondsMovesASlowGroupForward(t *testing.T) {
	f := newFixture(t, options(func(o *protocol.QueueOptions) { o.RetentionSeconds = 60 }))
	f.pop("slow", "", 1, true)
	f.push("p", "old-a", 10)
	f.push("p", "old-b", 10)
	if got := offsets(f.pop("slow", "", 5, true)); len(got) != 5 { // its cursor stands inside the first segment
		t.Fatalf("slow read %v", got)
	}
	f.backdate(2 * time.Minute)
	f.push("p", "new", 10) // 20..29, young
	if r := f.round(); r.Segments != 2 || r.Messages != 20 {
		t.Fatalf("round deleted %d segments, %d messages; want the 2 old ones", r.Segments, r.Messages)
	}
	p := f.stats("p")
	if g := groupStats(t, p, "slow"); p.HeadOffset != 30 || p.Messages != 10 || g.Cursor != 5 || g.Lag != 10 {
		t.Fatalf("stats %+v: want head 30, 10 messages, slow's cursor 5 with a lag of 10", p)
	}
	res := f.pop("slow", "", 100, false)
	if got := offsets(res); len(got) != 10 || got[0] != 20 || len(res.Leases) != 1 || res.Leases[0].FromOffset != 20 {
		t.Fatalf("slow's next pop: offsets %v, leases %+v; want 20..29 from 20", got, res.Leases)
	}
	ack := ackOffsets(f, res.Leases[0].LeaseID, protocol.AckCompleted, offsets(res)...)
	if len(ack.Leases) != 1 || ack.Leases[0].Cursor != 30 || !ack.Leases[0].Released {
		t.Fatalf("ack: %+v", ack)
	}
	if g := groupStats(t, f.stats("p"), "slow"); g.Cursor != 30 || g.Lag != 0 {
		t.Fatalf("slow after its ack: %+v", g)
	}
}

// A cursor whose every remaining message was deleted gets no empty lease:
// pop moves it to the end of its partition, so it stops being chosen, and
// the other partitions are served.
func TestACursorWithNothingRetainedMovesToTheEnd(t *testing.T) {
	f := newFixture(t, options(func(o *protocol.QueueOptions) { o.RetentionSeconds = 60 }))
	f.pop("slow", "", 1, true)
	f.push("a", "a", 10)
	f.backdate(2 * time.Minute)
	f.push("b", "b", 3)
	if r := f.round(); r.Segments != 1 {
		t.Fatalf("round deleted %d segments", r.Segments)
	}
	var got []int64
	for range 3 {
		res := f.pop("slow", "", 10, false)
		for _, l := range res.Leases {
			if l.Partition != "b" {
				t.Fatalf("a lease on %s, where nothing is retained: %+v", l.Partition, l)
			}
		}
		if got = offsets(res); len(got) > 0 {
			break
		}
	}
	if !slices.Equal(got, []int64{0, 1, 2}) {
		t.Fatalf("slow got %v from b, want 0..2", got)
	}
	var committed int64
	var leased, headSet bool
	if err := f.pool.QueryRow(f.ctx, `
		SELECT cu.committed, cu.lease_id IS NOT NULL, cu.head_at IS NOT NULL FROM queenside.cursors cu
		  JOIN queenside.partitions p ON p.id = cu.partition_id WHERE p.name = 'a'`).Scan(&committed, &leased, &headSet); err != nil {
		t.Fatal(err)
	}
	if committed != 10 || leased || headSet {
		t.Fatalf("a's cursor: committed %d, leased %v, head set %v; want 10, no lease, no head", committed, leased, headSet)
	}
	f.push("a", "later", 1)
	if got := offsets(f.pop("slow", "a", 10, true)); !slices.Equal(got, []int64{10}) {
		t.Fatalf("a new message in a: got %v, want 10", got)
	}
}

// Segments of a lease deleted under it: renew and acks by offset and by
// transaction id still work, and acking only what is retained moves the
// cursor over what is gone.
func TestALeaseOutlivesItsDeletedMessages(t *testing.T) {
	f := newFixture(t, options(func(o *protocol.QueueOptions) { o.RetentionSeconds = 60; o.LeaseSeconds = 600 }))
	f.pop("g", "", 1, true)
	f.push("p", "a", 10)
	f.backdate(2 * time.Minute)
	f.push("p", "b", 10)
	res := f.pop("g", "", 20, false)
	if len(res.Messages) != 20 || len(res.Leases) != 1 {
		t.Fatalf("pop: %v, leases %+v", offsets(res), res.Leases)
	}
	lease := res.Leases[0].LeaseID
	if r := f.round(); r.Segments != 1 {
		t.Fatalf("round deleted %d segments", r.Segments)
	}
	renewed, err := f.st.Renew(f.ctx, []string{lease}, 0)
	if err != nil || !renewed[0].Success {
		t.Fatalf("renew: %+v %v", renewed, err)
	}
	// The consumer completed the retained half first.
	ack := ackOffsets(f, lease, protocol.AckCompleted, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19)
	if ack.Leases[0].Cursor != 20 || !ack.Leases[0].Released {
		t.Fatalf("acking 10..19 over deleted 0..9: %+v; want cursor 20, released", ack)
	}

	// The same, acked by transaction id: the hashes outlive the messages.
	f.push("p", "c", 5) // 20..24
	f.backdate(2 * time.Minute)
	f.push("p", "d", 5) // 25..29
	res = f.pop("g", "", 10, false)
	lease = res.Leases[0].LeaseID
	if r := f.round(); r.Segments != 2 || r.Messages != 15 { // 10..19 as well, acked above
		t.Fatalf("round deleted %d segments, %d messages", r.Segments, r.Messages)
	}
	var items []protocol.AckItem
	for _, m := range res.Messages {
		items = append(items, protocol.AckItem{LeaseID: lease, TransactionID: m.TransactionID, Status: protocol.AckCompleted})
	}
	got, err := f.st.Ack(f.ctx, items)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range got.Results {
		if !r.Success {
			t.Fatalf("ack by transaction id: %+v", got.Results)
		}
	}
	if got.Leases[0].Cursor != 30 || !got.Leases[0].Released {
		t.Fatalf("ack by transaction id: %+v", got.Leases)
	}
}

// Dead letters hold their own copy and survive the retention of their
// message, however old they are.
func TestDeadLettersSurvive(t *testing.T) {
	f := newFixture(t, options(func(o *protocol.QueueOptions) { o.RetryLimit = 0; o.CompletedRetentionSeconds = 1 }))
	f.pop("g", "", 1, true)
	f.push("p", "doomed", 2)
	res := f.pop("g", "", 1, false)
	ack := ackOffsets(f, res.Leases[0].LeaseID, protocol.AckFailed, 0)
	if !ack.Results[0].DeadLettered {
		t.Fatalf("not dead-lettered: %+v", ack)
	}
	f.pop("g", "", 10, true)
	f.backdate(time.Hour)
	f.exec(`UPDATE queenside.dead_letters
	           SET dead_at = ((dead_at AT TIME ZONE 'UTC') - interval '10 years') AT TIME ZONE 'UTC',
	               committed_at = ((committed_at AT TIME ZONE 'UTC') - interval '10 years') AT TIME ZONE 'UTC'`)
	if r := f.round(); r.Segments != 1 {
		t.Fatalf("round deleted %d segments", r.Segments)
	}
	var payload []byte
	if err := f.pool.QueryRow(f.ctx, "SELECT payload FROM queenside.dead_letters WHERE transaction_id = 'doomed-0'").Scan(&payload); err != nil {
		t.Fatalf("the dead letter is gone: %v", err)
	}
	if string(payload) != "\xa1x" {
		t.Fatalf("dead letter payload %q", payload)
	}
}

// Each batch deletes every partition's segments from its oldest on, so what
// is retained of a partition stays one run up to its end; a batch stops
// within its budget and says where to go on.
func TestBatchesDeleteEachPartitionFromItsOldestSegment(t *testing.T) {
	f := newFixture(t, options(func(o *protocol.QueueOptions) { o.RetentionSeconds = 60 }))
	for i := range 4 {
		f.push("a", fmt.Sprintf("a%d", i), 3)
		f.push("b", fmt.Sprintf("b%d", i), 3)
	}
	f.backdate(2 * time.Minute)
	sess, ok, err := f.st.LockRetention(f.ctx)
	if err != nil || !ok {
		t.Fatalf("lock: %v %v", ok, err)
	}
	defer sess.Close()
	b, err := sess.ExpireSegments(f.ctx, 0, store.Budget{Segments: 3, Messages: 1000})
	if err != nil || b.Segments != 3 || b.Next == nil {
		t.Fatalf("first batch: %+v %v", b, err)
	}
	if got := f.retained("a"); !slices.Equal(got, [][2]int64{{9, 11}}) || len(f.retained("b")) != 4 {
		t.Fatalf("after 3 segments: a %v, b %v", got, f.retained("b"))
	}
	// About 4 messages: one segment of 3, which leaves more of b due.
	b, err = sess.ExpireSegments(f.ctx, *b.Next, store.Budget{Segments: 100, Messages: 4})
	if err != nil || b.Segments != 2 || b.Messages != 6 || b.Next == nil {
		t.Fatalf("second batch: %+v %v", b, err)
	}
	if a, bb := f.retained("a"), f.retained("b"); len(a) != 0 || !slices.Equal(bb, [][2]int64{{3, 5}, {6, 8}, {9, 11}}) {
		t.Fatalf("after the second batch: a %v, b %v", a, bb)
	}
	b, err = sess.ExpireSegments(f.ctx, *b.Next, store.Budget{Segments: 100, Messages: 1000})
	if err != nil || b.Segments != 3 || b.Next != nil {
		t.Fatalf("last batch: %+v %v", b, err)
	}
}

// Run deletes on its own, every interval.
func TestRunDeletesEveryInterval(t *testing.T) {
	f := newFixture(t, options(func(o *protocol.QueueOptions) { o.RetentionSeconds = 60 }))
	f.push("p", "a", 3)
	f.backdate(2 * time.Minute)
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		New(f.st, Options{Interval: 20 * time.Millisecond}).Run(ctx)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for len(f.retained("p")) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	if got := f.retained("p"); len(got) != 0 {
		t.Fatalf("after running a while, retained %v", got)
	}
}

// A pop of several partitions reads each run and leases it in one
// snapshot: segments deleted while it leases them (simulated here by a
// trigger that deletes the partition's segments when pop moves the cursor)
// are read all the same, whole, under their lease, which an ack then moves
// past. A pop of one partition reads after it leases: it finds the run
// gone, delivers nothing and keeps no lease, and the next pop skips what is
// gone.
func TestAPopWhoseRunVanishesWhileItLeases(t *testing.T) {
	pgtest.SkipOnCitus(t, "the test's trigger on cursors, which Citus does not allow on a distributed table")
	for _, partitions := range []int{2, 1} {
		t.Run(fmt.Sprintf("%d partitions", partitions), func(t *testing.T) {
			f := newFixture(t, protocol.DefaultQueueOptions())
			f.pop("g", "", 1, true)
			f.push("p", "a", 5)
			f.exec(`CREATE FUNCTION vanish() RETURNS trigger LANGUAGE plpgsql AS $$
			        BEGIN
			            IF NEW.lease_id IS DISTINCT FROM OLD.lease_id THEN
			                DELETE FROM queenside.segments s WHERE s.partition_id = NEW.partition_id;
			            END IF;
			            RETURN NEW;
			        END $$`)
			f.exec(`CREATE TRIGGER vanish BEFORE UPDATE ON queenside.cursors FOR EACH ROW EXECUTE FUNCTION vanish()`)
			res, err := f.st.Pop(f.ctx, store.PopRequest{Queue: f.queue, Group: "g", Batch: 10, Partitions: partitions, Mode: "all"}, 1<<24)
			if err != nil {
				t.Fatal(err)
			}
			f.exec(`DROP TRIGGER vanish ON queenside.cursors`)
			if f.count("SELECT count(*) FROM queenside.segments") != 0 {
				t.Fatal("the trigger did not delete the run")
			}
			if partitions == 1 {
				if len(res.Messages) != 0 || len(res.Leases) != 0 {
					t.Fatalf("pop over a vanished run: %v, leases %+v", offsets(res), res.Leases)
				}
				if n := f.count("SELECT count(*) FROM queenside.cursors WHERE lease_id IS NOT NULL"); n != 0 {
					t.Fatalf("%d cursors hold a lease on nothing", n)
				}
				f.pop("g", "", 10, false) // moves the cursor past what is gone
			} else {
				if got := offsets(res); !slices.Equal(got, []int64{0, 1, 2, 3, 4}) || len(res.Leases) != 1 ||
					res.Leases[0].FromOffset != 0 || res.Leases[0].ToOffset != 4 {
					t.Fatalf("pop while its run is deleted: %v, leases %+v, want 0..4 under one lease", got, res.Leases)
				}
				var items []protocol.AckItem
				for _, m := range res.Messages {
					off := m.Offset
					items = append(items, protocol.AckItem{LeaseID: m.LeaseID, Offset: &off, Status: protocol.AckCompleted})
				}
				if ar, err := f.st.Ack(f.ctx, items); err != nil || !ar.Results[0].Success || ar.Leases[0].Cursor != 5 {
					t.Fatalf("ack of the deleted run: %+v, %v", ar, err)
				}
			}
			f.push("p", "b", 1)
			if got := offsets(f.pop("g", "", 10, true)); !slices.Equal(got, []int64{5}) {
				t.Fatalf("after the vanished run: %v, want 5", got)
			}
		})
	}
}

// A pop of several partitions that finds a partition's run deleted by
// retention before it reads (the partition's row still says there are
// messages) delivers nothing of it and keeps no lease, and moves the cursor
// past what is gone.
func TestAPopWhoseRunIsGoneKeepsNoLease(t *testing.T) {
	f := newFixture(t, protocol.DefaultQueueOptions())
	f.pop("g", "", 1, true)
	f.push("p", "a", 5)
	f.exec(`DELETE FROM queenside.segments`)
	res, err := f.st.Pop(f.ctx, store.PopRequest{Queue: f.queue, Group: "g", Batch: 10, Partitions: 2, Mode: "all"}, 1<<24)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Messages) != 0 || len(res.Leases) != 0 {
		t.Fatalf("pop over a deleted run: %v, leases %+v", offsets(res), res.Leases)
	}
	if n := f.count("SELECT count(*) FROM queenside.cursors WHERE lease_id IS NOT NULL"); n != 0 {
		t.Fatalf("%d cursors hold a lease on nothing", n)
	}
	if n := f.count("SELECT count(*) FROM queenside.cursors WHERE committed = 5"); n != 1 {
		t.Fatal("the cursor did not move past what is gone")
	}
	f.push("p", "b", 1)
	if got := offsets(f.pop("g", "", 10, true)); !slices.Equal(got, []int64{5}) {
		t.Fatalf("after the deleted run: %v, want 5", got)
	}
}

// A group created after retention deleted the oldest messages starts at the
// first one retained, whether it reads from the beginning or from a time
// before everything that was deleted.
func TestNewGroupsStartAtTheFirstRetainedMessage(t *testing.T) {
	f := newFixture(t, options(func(o *protocol.QueueOptions) { o.RetentionSeconds = 60 }))
	f.push("p", "old", 5)
	f.backdate(2 * time.Minute)
	f.push("p", "new", 5)
	if r := f.round(); r.Segments != 1 {
		t.Fatalf("round deleted %d segments", r.Segments)
	}
	if got := offsets(f.pop("all", "", 100, true)); !slices.Equal(got, []int64{5, 6, 7, 8, 9}) {
		t.Fatalf("a group reading from the beginning got %v, want 5..9", got)
	}
	long := time.Now().Add(-time.Hour)
	res, err := f.st.Pop(f.ctx, store.PopRequest{Queue: f.queue, Group: "from", Batch: 100, Partitions: 1,
		AutoAck: true, Mode: "from", From: &long}, 1<<24)
	if err != nil {
		t.Fatal(err)
	}
	if got := offsets(res); !slices.Equal(got, []int64{5, 6, 7, 8, 9}) {
		t.Fatalf("a group reading from an hour ago got %v, want 5..9", got)
	}
	if p := f.stats("p"); p.Messages != 5 || groupStats(t, p, "all").Lag != 0 {
		t.Fatalf("stats %+v", p)
	}
}
