package sidecar

import (
	"errors"
	"testing"
	"time"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
)

// A pop, a long-poll, an ack carrying a pop, a seek or a group listing of
// a queue nothing pushed to or configured leaves nothing behind: no queue
// in any listing.
func TestPopOfAQueueThatDoesNotExistLeavesNothing(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	ctx := testContext(t)
	for _, a := range []queenside.PopArgs{
		{Queue: "nosuch"},
		{Queue: "nosuch", Group: "g", SubscriptionMode: protocol.SubscribeNew},
		{Queue: "nosuch", Partition: "p", AutoAck: true},
		{Queue: "nosuch", Group: "g", WaitMs: 300},
	} {
		res, err := c.Pop(ctx, a)
		if err != nil || len(res.Messages) != 0 || len(res.Leases) != 0 {
			t.Fatalf("pop %+v: %+v %v; want nothing", a, res, err)
		}
	}
	mustPush(t, c, item(t, "real", "p", "r0", 0))
	popped, err := c.Pop(ctx, queenside.PopArgs{Queue: "real", Group: "g"})
	if err != nil || len(popped.Messages) != 1 {
		t.Fatalf("pop of a real queue: %+v %v", popped, err)
	}
	// An ack carrying a pop of a queue that does not exist: the ack is
	// applied, the pop delivers nothing.
	ar, err := c.AckAndPop(ctx, queenside.PopArgs{Queue: "nosuch2"}, popped.Messages[0].Completed())
	if err != nil || !ar.Results[0].Success || ar.Pop == nil || len(ar.Pop.Messages) != 0 {
		t.Fatalf("ack carrying a pop of a missing queue: %+v %v", ar, err)
	}
	var qe *queenside.Error
	if _, err := c.Seek(ctx, "nosuch3", "g", "", queenside.SeekBeginning); !errors.As(err, &qe) || qe.Code != protocol.CodeNotFound {
		t.Fatalf("seek of a missing queue: %v; want not_found", err)
	}
	if _, err := c.Groups(ctx, "nosuch"); !errors.As(err, &qe) || qe.Code != protocol.CodeNotFound {
		t.Fatalf("groups of a missing queue: %v; want not_found", err)
	}
	if _, err := c.Stats(ctx, "nosuch"); !errors.As(err, &qe) || qe.Code != protocol.CodeNotFound {
		t.Fatalf("stats of a missing queue: %v; want not_found", err)
	}
	queues, err := c.Queues(ctx)
	if err != nil || len(queues) != 1 || queues[0].Queue != "real" {
		t.Fatalf("queues: %+v %v; want only the queue pushed to", queues, err)
	}
	groups, err := c.Groups(ctx, "")
	if err != nil || len(groups) != 1 || groups[0].Queue != "real" {
		t.Fatalf("groups: %+v %v; want only the real queue's", groups, err)
	}
}

// A consumer started before its producers: its long-poll is woken by the
// first push, and its subscription holds from its first pop. A group
// subscribed to new messages before the queue existed is delivered the
// queue's first messages; one subscribed from a time, what came from then.
func TestConsumerStartedBeforeItsProducers(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	waiter, pusher := ts.client(t), ts.client(t)
	ctx := testContext(t)

	type popped struct {
		res protocol.PopResult
		err error
		at  time.Time
	}
	done := make(chan popped, 1)
	go func() {
		res, err := waiter.Pop(ctx, queenside.PopArgs{Queue: "early", Group: "g", WaitMs: 10000, SubscriptionMode: protocol.SubscribeNew, AutoAck: true})
		done <- popped{res, err, time.Now()}
	}()
	time.Sleep(300 * time.Millisecond)
	mustPush(t, pusher, item(t, "early", "p", "e0", 0))
	pushed := time.Now()
	p := <-done
	if p.err != nil || len(p.res.Messages) != 1 || p.res.Messages[0].TransactionID != "e0" {
		t.Fatalf("a long-poll begun before the queue existed: %+v %v", p.res, p.err)
	}
	t.Logf("woken %v after the first push", p.at.Sub(pushed).Round(time.Millisecond))

	// Polls, not a long-poll: the first pop, of a queue not there yet,
	// subscribes to what is new from then on; messages pushed between it
	// and the next pop are new to it.
	if res, err := waiter.Pop(ctx, queenside.PopArgs{Queue: "later", Group: "fresh", SubscriptionMode: protocol.SubscribeNew}); err != nil || len(res.Messages) != 0 {
		t.Fatalf("first pop: %+v %v", res, err)
	}
	from := time.Now().Add(time.Hour)
	if res, err := waiter.Pop(ctx, queenside.PopArgs{Queue: "later", Group: "future", SubscriptionMode: protocol.SubscribeFrom, SubscriptionFrom: &from}); err != nil || len(res.Messages) != 0 {
		t.Fatalf("first pop from a future time: %+v %v", res, err)
	}
	mustPush(t, pusher, item(t, "later", "p", "l0", 0), item(t, "later", "p", "l1", 1))
	res, err := waiter.Pop(ctx, queenside.PopArgs{Queue: "later", Group: "fresh", SubscriptionMode: protocol.SubscribeNew, Batch: 10, AutoAck: true})
	if err != nil || len(res.Messages) != 2 {
		t.Fatalf("a new-messages group subscribed before the queue existed: %+v %v; want both messages", res, err)
	}
	// A group whose first pop comes now subscribes to what is new now.
	if res, err := waiter.Pop(ctx, queenside.PopArgs{Queue: "later", Group: "now", SubscriptionMode: protocol.SubscribeNew}); err != nil || len(res.Messages) != 0 {
		t.Fatalf("a new-messages group subscribed after the pushes: %+v %v; want none", res, err)
	}
	if res, err := waiter.Pop(ctx, queenside.PopArgs{Queue: "later", Group: "future"}); err != nil || len(res.Messages) != 0 {
		t.Fatalf("a group subscribed from an hour ahead: %+v %v; want none", res, err)
	}
}
