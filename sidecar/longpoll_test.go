package sidecar

import (
	"context"
	"runtime"
	"testing"
	"time"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
)

func TestLongPollWakesOnAPushThroughAnotherProcess(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	other := startServe(t, ts.dbURL)
	waiter, pusher := ts.client(t), dialClient(t, other.socket)
	for round := 0; round < 3; round++ {
		type popped struct {
			res protocol.PopResult
			at  time.Time
			err error
		}
		done := make(chan popped, 1)
		go func() {
			res, err := waiter.Pop(context.Background(), protocol.PopArgs{Queue: "lp", Group: "g", WaitMs: 10000, AutoAck: true})
			done <- popped{res, time.Now(), err}
		}()
		time.Sleep(300 * time.Millisecond) // the pop is waiting by now
		select {
		case p := <-done:
			t.Fatalf("pop answered before any push: %+v %v", p.res, p.err)
		default:
		}
		mustPush(t, pusher, item(t, "lp", "p", "", round))
		pushed := time.Now()
		p := <-done
		if p.err != nil || len(p.res.Messages) != 1 {
			t.Fatalf("pop: %+v %v", p.res, p.err)
		}
		// Without the wake-up the pop is answered by its loop's re-check,
		// recheckInterval after it began waiting: some 700 ms after the
		// push. Woken, it is answered within a round trip or two, which a
		// loaded machine (-race, other suites' PostgreSQLs) stretches past
		// 100 ms now and then.
		if lag := p.at.Sub(pushed); lag > recheckInterval*35/100 {
			t.Fatalf("round %d: the pop answered %v after the push, want < %v: not woken by the push", round, lag, recheckInterval*35/100)
		} else {
			t.Logf("round %d: woken %v after the push answered", round, lag)
		}
	}
}

func TestIdleLongPollDoesNotBusyPoll(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	mustPop(t, c, protocol.PopArgs{Queue: "idle"}) // creates the queue and group
	before := ts.srv.store.RoundTrips()
	start := time.Now()
	res := mustPop(t, c, protocol.PopArgs{Queue: "idle", WaitMs: 4000})
	waited := time.Since(start)
	if len(res.Messages) != 0 || waited < 3900*time.Millisecond {
		t.Fatalf("pop on an empty queue returned %d messages after %v", len(res.Messages), waited)
	}
	// One look at first, then a safety re-check a second; a look is two
	// round trips (the pop with its BEGIN, then the COMMIT), and a third
	// when the pool pings a connection that sat idle for over a second,
	// which a loaded machine's timing makes happen now and then. Busy
	// polling would be hundreds.
	if n := ts.srv.store.RoundTrips() - before; n > 3*6 {
		t.Fatalf("%d database round trips during a 4 s idle wait: busy polling", n)
	} else {
		t.Logf("%d database round trips during a 4 s idle wait", n)
	}
}

func TestSubscriptionModes(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	pushN(t, c, "s", "p", "old", 3)

	// new: skips the backlog, then gets what comes after.
	if res := mustPop(t, c, protocol.PopArgs{Queue: "s", Group: "fresh", SubscriptionMode: protocol.SubscribeNew, AutoAck: true, Batch: 10}); len(res.Messages) != 0 {
		t.Fatalf("subscription new delivered the backlog: %v", offsets(res.Messages))
	}
	pushN(t, c, "s", "p", "after", 2)
	mustPush(t, c, item(t, "s", "later-partition", "", "x")) // a partition created after the subscription
	got := drain(t, c, "s", "fresh")
	if len(got) != 3 {
		t.Fatalf("subscription new got %d messages, want the 3 pushed after it", len(got))
	}
	for _, m := range got {
		if m.Partition == "p" && m.Offset < 3 {
			t.Fatalf("subscription new got backlog offset %d", m.Offset)
		}
	}

	// from: the first message committed at or after the time.
	res, err := c.Push(testContext(t), item(t, "f", "p", "", 0), item(t, "f", "p", "", 1))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	second, _ := c.Push(testContext(t), item(t, "f", "p", "", 2))
	from := second[0].CommittedAt
	time.Sleep(20 * time.Millisecond)
	mustPush(t, c, item(t, "f", "p", "", 3))
	if !res[0].CommittedAt.Before(from) {
		t.Fatal("commit times did not advance")
	}
	got = nil
	for {
		r := mustPop(t, c, protocol.PopArgs{Queue: "f", Group: "since", SubscriptionMode: protocol.SubscribeFrom, SubscriptionFrom: &from, AutoAck: true, Batch: 10})
		if len(r.Messages) == 0 {
			break
		}
		got = append(got, r.Messages...)
	}
	wantOffsets(t, got, 2, 3)

	// The mode is recorded at the group's first pop: later modes are ignored.
	if r := mustPop(t, c, protocol.PopArgs{Queue: "s", Group: "fresh", SubscriptionMode: protocol.SubscribeAll, AutoAck: true, Batch: 10}); len(r.Messages) != 0 {
		t.Fatalf("a later pop's mode rewound the group: %v", offsets(r.Messages))
	}
}

func TestLongestWaitingPartitionGoesFirst(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	mustPush(t, c, item(t, "q", "quiet", "", "old"))
	for i := 0; i < 5; i++ {
		pushN(t, c, "q", "busy", string(rune('a'+i)), 20)
	}
	res := mustPop(t, c, protocol.PopArgs{Queue: "q", Batch: 10, AutoAck: true})
	if len(res.Messages) != 1 || res.Messages[0].Partition != "quiet" {
		t.Fatalf("first pop went to %s, want the partition whose message waited longest", res.Messages[0].Partition)
	}
	mustPush(t, c, item(t, "q", "quiet", "", "new"))
	res = mustPop(t, c, protocol.PopArgs{Queue: "q", Batch: 10, AutoAck: true})
	if res.Messages[0].Partition != "busy" {
		t.Fatalf("second pop went to %s: busy's backlog is older", res.Messages[0].Partition)
	}
	// Acks move the head too: once busy's backlog is acked, a message
	// pushed to busy now is newer than quiet's, and quiet goes first.
	for {
		r := mustPop(t, c, protocol.PopArgs{Queue: "q", Partition: "busy", Batch: 40})
		if len(r.Messages) == 0 {
			break
		}
		for i := len(r.Messages) - 1; i >= 0; i-- { // out of order, to move the cursor in one step
			mustAck(t, c, queenside.Completed(r.Messages[i]))
		}
	}
	mustPush(t, c, item(t, "q", "busy", "", "newest"))
	res = mustPop(t, c, protocol.PopArgs{Queue: "q", Batch: 1, AutoAck: true})
	if res.Messages[0].Partition != "quiet" {
		t.Fatalf("third pop went to %s offset %d, want quiet, whose message is older", res.Messages[0].Partition, res.Messages[0].Offset)
	}
}

func TestDisconnectWhileWaitingLeaksNothing(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	mustPop(t, c, protocol.PopArgs{Queue: "q", Group: "g"})
	baseline := runtime.NumGoroutine()
	for i := 0; i < 5; i++ {
		r := dialRaw(t, ts.socket)
		r.sendRequest(1, protocol.OpPop, protocol.PopArgs{Queue: "q", Group: "g", WaitMs: 30000})
		time.Sleep(50 * time.Millisecond)
		r.nc.Close()
	}
	time.Sleep(100 * time.Millisecond)
	mustPush(t, c, item(t, "q", "p", "", "hello"))
	// The departed waiters took no lease: another consumer gets the message
	// at once, as its first delivery.
	res := mustPop(t, c, protocol.PopArgs{Queue: "q", Group: "g", WaitMs: 2000})
	if len(res.Messages) != 1 || res.Leases[0].HeadAttempts != 1 || res.Messages[0].Redelivered {
		t.Fatalf("after the waiters left: %+v", res)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > baseline+2 {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, %d before the waiters:\n%s", runtime.NumGoroutine(), baseline, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestDrainEndsWaitingPopsEmpty(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	done := make(chan protocol.PopResult, 1)
	go func() {
		res, err := c.Pop(context.Background(), protocol.PopArgs{Queue: "q", WaitMs: 30000})
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	time.Sleep(200 * time.Millisecond)
	go ts.srv.Shutdown(context.Background()) //nolint:errcheck
	select {
	case res := <-done:
		if len(res.Messages) != 0 {
			t.Fatalf("drain: %+v", res)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a waiting pop held up the drain")
	}
}

func TestSubscriptionFromAFutureTime(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	mustPush(t, c, item(t, "fut", "p", "", "before"))
	from := time.Now().Add(700 * time.Millisecond)
	args := protocol.PopArgs{Queue: "fut", Group: "later", SubscriptionMode: protocol.SubscribeFrom, SubscriptionFrom: &from, AutoAck: true, Batch: 10}
	if r := mustPop(t, c, args); len(r.Messages) != 0 {
		t.Fatalf("a subscription from a future time delivered %v", offsets(r.Messages))
	}
	mustPush(t, c, item(t, "fut", "p", "", "still before"), item(t, "fut", "new-partition", "", "before too"))
	time.Sleep(time.Until(from) + 50*time.Millisecond)
	mustPush(t, c, item(t, "fut", "p", "", "after"), item(t, "fut", "new-partition", "", "after too"))
	got := drain(t, c, "fut", "later")
	if len(got) != 2 {
		t.Fatalf("got %d messages (%v), want the 2 committed after the start", len(got), got)
	}
	for _, m := range got {
		if m.CommittedAt.Before(from) {
			t.Fatalf("delivered %s/%d committed at %v, before the start %v", m.Partition, m.Offset, m.CommittedAt, from)
		}
	}
}

// first_offset_at finds the first message committed at or after a time by
// a binary search over the segments; check it against every boundary.
func TestFirstOffsetAtEveryBoundary(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	var times []time.Time // commit time of each offset
	for i := 0; i < 40; i++ {
		n := 1 + i%3 // segments of 1 to 3 messages
		var items []protocol.PushItem
		for k := 0; k < n; k++ {
			items = append(items, item(t, "t", "p", "", i))
		}
		for _, r := range mustPush(t, c, items...) {
			times = append(times, r.CommittedAt)
		}
	}
	var pid int64
	if err := ts.pool.QueryRow(testContext(t), "SELECT id FROM queenside.partitions WHERE name = 'p'").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	ask := func(at *time.Time) int64 {
		var off int64
		if err := ts.pool.QueryRow(testContext(t), "SELECT queenside.first_offset_at($1, $2)", pid, at).Scan(&off); err != nil {
			t.Fatal(err)
		}
		return off
	}
	if got := ask(nil); got != 0 {
		t.Fatalf("with no time: %d, want 0", got)
	}
	for want, at := range times {
		if want > 0 && times[want-1].Equal(at) {
			continue // same segment: its first offset is the answer
		}
		if got := ask(&at); got != int64(want) {
			t.Fatalf("at the commit time of offset %d: got %d", want, got)
		}
		before := at.Add(-time.Microsecond)
		if got := ask(&before); got != int64(want) && !(want > 0 && times[want-1].After(before)) {
			t.Fatalf("just before offset %d: got %d", want, got)
		}
	}
	after := times[len(times)-1].Add(time.Microsecond)
	if got := ask(&after); got != int64(len(times)) {
		t.Fatalf("after the last message: %d, want the next offset %d", got, len(times))
	}
}
