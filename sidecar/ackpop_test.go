package sidecar

import (
	"context"
	"testing"
	"time"

	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/pgtest"
)

// An ack that carries the next pop: the acks are applied and the pop is
// served in one request, on one PostgreSQL in one transaction; the pop sees
// what the acks released.
func TestAckCarryingThePopIsOneTransaction(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	ctx := testContext(t)
	pushN(t, c, "ap", "a", "a", 2)
	pushN(t, c, "ap", "b", "b", 2)
	args := protocol.PopArgs{Queue: "ap", Group: "g", Batch: 10}
	first := mustPop(t, c, args)
	if len(first.Leases) != 1 {
		t.Fatalf("first pop: %+v", first.Leases)
	}
	held := first.Leases[0].Partition

	res, err := c.AckAndPop(ctx, args, completedAll(first)...)
	if err != nil || res.PopError != nil || res.Pop == nil {
		t.Fatalf("ack with pop: %+v %v", res, err)
	}
	for _, r := range res.Results {
		if !r.Success {
			t.Fatalf("ack item: %+v", r)
		}
	}
	if len(res.Leases) != 1 || !res.Leases[0].Released || res.Leases[0].Cursor != 2 {
		t.Fatalf("the acked lease: %+v", res.Leases)
	}
	next := *res.Pop
	if len(next.Leases) != 1 || next.Leases[0].Partition == held || len(next.Messages) != 2 {
		t.Fatalf("the pop carried by the ack: %+v", next)
	}

	// A consumer of one partition acks half of it and asks for more: the
	// pop, after the acks, gets the rest at once.
	pushN(t, c, "one", "p", "x", 4)
	mine := protocol.PopArgs{Queue: "one", Partition: "p", Group: "g", Batch: 2, WaitMs: 5000}
	half := mustPop(t, c, mine)
	start := time.Now()
	rest, err := c.AckAndPop(ctx, mine, completedAll(half)...)
	if err != nil || rest.Pop == nil || len(rest.Pop.Messages) != 2 || rest.Pop.Messages[0].Offset != 2 {
		t.Fatalf("the rest of the partition: %+v %v", rest, err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("the rest came after %v: the pop waited for what its own acks released", took)
	}
	// One transaction: both cursors' rows carry its id. On Citus each call
	// of a round commits on its own worker (SCALING.md, "Each call on
	// Citus"): the pop still comes after the acks, as above.
	if !pgtest.Citus() {
		var xids []string
		rows, err := ts.pool.Query(ctx, `SELECT cu.xmin::text FROM queenside.cursors cu
			JOIN queenside.partitions p ON p.id = cu.partition_id WHERE p.name IN ('a', 'b')`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var x string
			if err := rows.Scan(&x); err != nil {
				t.Fatal(err)
			}
			xids = append(xids, x)
		}
		if rows.Err() != nil || len(xids) != 2 || xids[0] != xids[1] {
			t.Fatalf("the acked cursor and the leased one were written by transactions %v: want one", xids)
		}
	}

	// Nothing left: with a wait, the acks are applied at once and the pop
	// waits for what comes.
	answered := make(chan protocol.AckResult, 1)
	go func() {
		a := args
		a.WaitMs = 10000
		r, err := c.AckAndPop(ctx, a, completedAll(next)...)
		if err != nil {
			t.Error(err)
		}
		answered <- r
	}()
	waitFor(t, 5*time.Second, "the ack to be applied while the pop waits", func() bool {
		st, err := c.Stats(ctx, "ap")
		if err != nil {
			return false
		}
		for _, p := range st.Partitions {
			if p.Groups[0].Lag != 0 {
				return false
			}
		}
		return true
	})
	select {
	case r := <-answered:
		t.Fatalf("answered before anything came: %+v", r)
	default:
	}
	pushN(t, c, "ap", "c", "c", 1)
	select {
	case r := <-answered:
		if r.Pop == nil || len(r.Pop.Messages) != 1 || r.Pop.Messages[0].Partition != "c" || !r.Results[0].Success {
			t.Fatalf("the waiting pop: %+v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the pop carried by the ack was not woken by the push")
	}

	// A malformed pop fails the call, and no ack is applied.
	raw := dialRaw(t, ts.socket)
	raw.sendRequest(1, protocol.OpAck, map[string]any{
		"items": []map[string]any{{"leaseId": "1.1.00000000000000000000000000000000", "offset": 0}},
		"pop":   map[string]any{"queue": "ap", "batch": 0}})
	if r := raw.read(); r.Error == nil || r.Error.Code != protocol.CodeInvalidArgument || r.Error.Message != "pop.batch: 0 out of range 1..10000" {
		t.Fatalf("a malformed pop: %+v", r.Error)
	}
}

// A client that hangs up while the pop its ack carries waits: the acks
// stay applied, and the pop leases nothing.
func TestAckCarryingThePopWhenTheClientLeaves(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	pushN(t, c, "gone", "a", "a", 1)
	args := protocol.PopArgs{Queue: "gone", Group: "g", Batch: 10}
	first := mustPop(t, c, args)
	other := dialClient(t, ts.socket)
	ctx, cancel := context.WithCancel(testContext(t))
	done := make(chan struct{})
	go func() {
		defer close(done)
		a := args
		a.WaitMs = 20000
		other.AckAndPop(ctx, a, completedAll(first)...) //nolint:errcheck // the client leaves
	}()
	waitFor(t, 5*time.Second, "the ack to be applied", func() bool {
		st, err := c.Stats(testContext(t), "gone")
		return err == nil && st.Partitions[0].Groups[0].Cursor == 1
	})
	other.Close()
	cancel()
	<-done
	time.Sleep(200 * time.Millisecond) // the sidecar sees the hang-up
	pushN(t, c, "gone", "a", "b", 1)
	if res := mustPop(t, c, args); len(res.Messages) != 1 || res.Messages[0].Offset != 1 {
		t.Fatalf("after the client left, the next message: %+v", res)
	}
}
