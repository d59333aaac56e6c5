package queenside_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
)

// opCounter is a socket proxy between a client and a sidecar that counts
// the requests going through it by op, so that a test sees what the
// client really sent.
type opCounter struct {
	mu   sync.Mutex
	byOp map[string]int
}

func (oc *opCounter) count(op string) int {
	oc.mu.Lock()
	defer oc.mu.Unlock()
	return oc.byOp[op]
}

// opAckWithPop is how opCounter counts an ack that carries a pop.
const opAckWithPop = "ack+pop"

// countingProxy serves a socket that forwards to upstream, and counts.
func countingProxy(t *testing.T, upstream string) (string, *opCounter) {
	t.Helper()
	path := socketPath(t)
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	oc := &opCounter{byOp: map[string]int{}}
	go func() {
		for {
			down, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("unix", upstream)
			if err != nil {
				down.Close()
				continue
			}
			go func() { io.Copy(down, up); down.Close() }() //nolint:errcheck
			go func() {
				defer up.Close()
				for {
					body, err := protocol.ReadFrame(down, nil, 1<<30)
					if err != nil {
						return
					}
					var req protocol.Request
					if protocol.Unmarshal(body, &req) == nil {
						op := req.Op
						if a, err := protocol.DecodeAckArgs(req.Args); op == protocol.OpAck && err == nil && a.Pop != nil {
							op = opAckWithPop
						}
						oc.mu.Lock()
						oc.byOp[op]++
						oc.mu.Unlock()
					}
					if protocol.WriteFrame(up, body) != nil {
						return
					}
				}
			}()
		}
	}()
	return path, oc
}

func pushPartitioned(t *testing.T, c *queenside.Client, queue string, n, partitions int) {
	t.Helper()
	var items []protocol.PushItem
	for i := 0; i < n; i++ {
		it, err := queenside.Item(queue, i)
		if err != nil {
			t.Fatal(err)
		}
		it.Partition = fmt.Sprintf("p%d", i%partitions)
		it.TransactionID = fmt.Sprintf("m%d", i)
		items = append(items, it)
		if len(items) == 500 || i == n-1 {
			if _, err := c.Push(context.Background(), items...); err != nil {
				t.Fatal(err)
			}
			items = nil
		}
	}
}

// With AckAsync every message is handled and acked once, and acks of
// several batches share ack calls.
func TestConsumeAckAsyncAcksEveryMessageOnceInFewerCalls(t *testing.T) {
	const n, partitions = 3000, 10
	path := startSidecar(t)
	proxied, counter := countingProxy(t, path)
	c, check := dial(t, proxied), dial(t, path)
	pushPartitioned(t, check, "async", n, partitions)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	seen := map[string]int{}
	leases := map[string]bool{}
	var ackErrs []error
	var mu sync.Mutex
	_, err := c.Consume(ctx, "async", func(_ context.Context, m queenside.Message) error {
		seen[m.TransactionID]++
		leases[m.LeaseID] = true
		if len(seen) == n {
			cancel() // the last message: its batch has nothing left to release
		}
		return nil
	}, queenside.ConsumeOptions{
		Group: "g", Batch: 10, WaitMs: 200, AckAsync: true,
		OnAckError: func(err error) { mu.Lock(); ackErrs = append(ackErrs, err); mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(ackErrs) > 0 {
		t.Fatalf("acks failed: %v", ackErrs)
	}
	if len(seen) != n {
		t.Fatalf("handled %d distinct messages, want %d", len(seen), n)
	}
	for id, k := range seen {
		if k != 1 {
			t.Fatalf("%s handled %d times", id, k)
		}
	}
	st, err := check.Stats(context.Background(), "async")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range st.Partitions {
		for _, g := range p.Groups {
			if g.Lag != 0 || g.Leased {
				t.Fatalf("partition %s after consuming: %+v", p.Partition, g)
			}
		}
	}
	acks, batches := counter.count(protocol.OpAck), len(leases)
	t.Logf("%d batches, %d ack calls, %d pops", batches, acks, counter.count(protocol.OpPop))
	if acks >= batches {
		t.Fatalf("%d ack calls for %d batches: nothing was coalesced", acks, batches)
	}
	// Nothing is left for the group: a fresh pop gets nothing.
	res, err := check.Pop(context.Background(), queenside.PopArgs{Queue: "async", Group: "g", Batch: 10, Partitions: partitions})
	if err != nil || len(res.Messages) != 0 {
		t.Fatalf("after consuming: %d messages (%v)", len(res.Messages), err)
	}
}

// Stopping right after a handler returned still acks its message: Consume
// returns once the pending acks were answered.
func TestConsumeAckAsyncStopFlushesPendingAcks(t *testing.T) {
	path := startSidecar(t)
	c, next := dial(t, path), dial(t, path)
	pushMany(t, c, "flush", 10)
	ctx, cancel := context.WithCancel(context.Background())
	_, err := c.Consume(ctx, "flush", func(_ context.Context, m queenside.Message) error {
		if m.Offset == 9 {
			cancel()
		}
		return nil
	}, queenside.ConsumeOptions{Group: "g", Batch: 10, LeaseSeconds: 60, WaitMs: 200, AckAsync: true})
	if err != nil {
		t.Fatal(err)
	}
	res, err := next.Pop(context.Background(), queenside.PopArgs{Queue: "flush", Group: "g", Batch: 10})
	if err != nil || len(res.Messages) != 0 {
		t.Fatalf("after the stop a pop got %d messages (%v): the acks were not flushed", len(res.Messages), err)
	}
	st, _ := next.Stats(context.Background(), "flush")
	if g := st.Partitions[0].Groups[0]; g.Cursor != 10 || g.Leased {
		t.Fatalf("after the stop: %+v", g)
	}
}

// A stop in the middle of a batch acks what completed before releasing the
// rest: the acks go first, or the release would make them refused.
func TestConsumeAckAsyncStopMidBatchAcksThenReleases(t *testing.T) {
	path := startSidecar(t)
	c, next := dial(t, path), dial(t, path)
	pushMany(t, c, "mid", 10)
	ctx, cancel := context.WithCancel(context.Background())
	_, err := c.Consume(ctx, "mid", func(_ context.Context, m queenside.Message) error {
		if m.Offset == 2 {
			cancel()
		}
		return nil
	}, queenside.ConsumeOptions{Batch: 10, LeaseSeconds: 60, WaitMs: 200, AckAsync: true})
	if err != nil {
		t.Fatal(err)
	}
	res, err := next.Pop(context.Background(), queenside.PopArgs{Queue: "mid", Batch: 10})
	if err != nil || len(res.Messages) != 7 || res.Messages[0].Offset != 3 {
		t.Fatalf("after the stop: %d messages from %v (%v)", len(res.Messages), res.Messages, err)
	}
}

// A nack with AckAsync rewinds as without it: the failed message comes
// again, then the rest, in order.
func TestConsumeAckAsyncRetriesFailuresInOrder(t *testing.T) {
	c := dial(t, startSidecar(t))
	pushMany(t, c, "nack", 20)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var seen []int64
	failedOnce := false
	_, err := c.Consume(ctx, "nack", func(_ context.Context, m queenside.Message) error {
		seen = append(seen, m.Offset)
		if m.Offset == 5 && !failedOnce {
			failedOnce = true
			return errors.New("transient")
		}
		if m.Offset == 19 {
			cancel()
		}
		return nil
	}, queenside.ConsumeOptions{Batch: 8, WaitMs: 200, AckAsync: true})
	if err != nil {
		t.Fatal(err)
	}
	want := []int64{0, 1, 2, 3, 4, 5}
	for i := int64(5); i < 20; i++ {
		want = append(want, i)
	}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("handled %v\nwant    %v", seen, want)
	}
	st, _ := c.Stats(context.Background(), "nack")
	if g := st.Partitions[0].Groups[0]; g.Cursor != 20 || g.Leased {
		t.Fatalf("after consuming: %+v", g)
	}
}

// slowFirstDelivery returns a handler that outlives a 1 s lease on the
// first delivery of offset 0, and stops the consumer once offset 0 came a
// second time.
func slowFirstDelivery(cancel context.CancelFunc, deliveries *atomic.Int32) queenside.Handler {
	return func(_ context.Context, m queenside.Message) error {
		if deliveries.Add(1) == 1 {
			time.Sleep(1500 * time.Millisecond) // the lease lapses meanwhile
		} else {
			cancel()
		}
		return nil
	}
}

// An ack refused because the lease lapsed is reported, never taken for a
// success, and the message comes again.
func TestConsumeAckAsyncReportsAnAckOfALapsedLease(t *testing.T) {
	c := dial(t, startSidecar(t))
	pushMany(t, c, "lapse", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var deliveries atomic.Int32
	var mu sync.Mutex
	var ackErrs []error
	_, err := c.Consume(ctx, "lapse", slowFirstDelivery(cancel, &deliveries), queenside.ConsumeOptions{
		Batch: 1, LeaseSeconds: 1, RenewEvery: time.Hour, WaitMs: 200, AckAsync: true,
		OnAckError: func(err error) { mu.Lock(); ackErrs = append(ackErrs, err); mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	if d := deliveries.Load(); d != 2 {
		t.Fatalf("offset 0 delivered %d times, want 2 (once more after the refused ack)", d)
	}
	if len(ackErrs) != 1 {
		t.Fatalf("%d ack errors reported, want 1: %v", len(ackErrs), ackErrs)
	}
	var ae *queenside.AckError
	if !errors.As(ackErrs[0], &ae) || len(ae.Items) != 1 || *ae.Items[0].Offset != 0 || ae.Codes[0] != protocol.ItemLeaseExpired {
		t.Fatalf("reported %#v", ackErrs[0])
	}
	st, _ := c.Stats(context.Background(), "lapse")
	if g := st.Partitions[0].Groups[0]; g.Cursor != 1 {
		t.Fatalf("cursor %d after the redelivery was acked, want 1", g.Cursor)
	}
}

// Without OnAckError a failed ack ends Consume with the *AckError.
func TestConsumeAckAsyncWithoutCallbackReturnsTheAckError(t *testing.T) {
	c := dial(t, startSidecar(t))
	pushMany(t, c, "lapse2", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var deliveries atomic.Int32
	_, err := c.Consume(ctx, "lapse2", slowFirstDelivery(cancel, &deliveries), queenside.ConsumeOptions{
		Batch: 1, LeaseSeconds: 1, RenewEvery: time.Hour, WaitMs: 200, AckAsync: true,
	})
	var ae *queenside.AckError
	if !errors.As(err, &ae) || ae.Codes[0] != protocol.ItemLeaseExpired {
		t.Fatalf("Consume returned %v, want the refused ack", err)
	}
}
