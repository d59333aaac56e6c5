package queenside

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/queenside/queenside/protocol"
)

// AckError reports ack items that did not succeed: the cursor did not move
// for them, and their messages will be delivered again (after the lease
// expires, or at once when it was released). Consume with AckAsync hands
// it to ConsumeOptions.OnAckError. An item answered already_acked is not
// one of them: an earlier ack settled its message.
type AckError struct {
	// Items are the items that did not succeed.
	Items []AckItem
	// Indexes holds each of Items' position in its ack call, from 0.
	Indexes []int
	// Codes holds the sidecar's code for each of Items (lease_expired,
	// not_in_lease, rewound...; ItemCodeText says them in words) when the
	// call was answered; nil when Err is set.
	Codes []string
	// Err is the error of the ack call itself (the connection broke, the
	// sidecar was unavailable...); nil when the call was answered and only
	// some items were refused.
	Err error
}

// maxItemsTold bounds how many refused items AckError's text spells out.
const maxItemsTold = 5

// Error says "queenside: 1 ack item(s) refused, to be delivered again: ack
// item 0 (offset 7): lease expired (lease_expired)".
func (e *AckError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("queenside: ack of %d item(s) failed: %v", len(e.Items), e.Err)
	}
	var told []string
	for i, it := range e.Items {
		if i == maxItemsTold {
			told = append(told, fmt.Sprintf("and %d more", len(e.Items)-i))
			break
		}
		var index int
		var code string
		if i < len(e.Indexes) && i < len(e.Codes) {
			index, code = e.Indexes[i], e.Codes[i]
		}
		told = append(told, describeAckItem(index, it, code))
	}
	return fmt.Sprintf("queenside: %d ack item(s) refused, to be delivered again: %s", len(e.Items), strings.Join(told, "; "))
}

func (e *AckError) Unwrap() error { return e.Err }

// acker sends the acks of a Consume with AckAsync in the background. At
// most one ack call is in flight: items added meanwhile wait, and the next
// call carries all of them, whatever batch or lease they came from. So a
// consumer whose acks take longer than a pop sends fewer, larger acks,
// and never more than one per batch.
type acker struct {
	c     *Client
	onErr func(error)

	mu       sync.Mutex
	idle     *sync.Cond // signalled when flushing turns false
	pending  []AckItem
	done     []func() // called once the pending items are answered
	flushing bool     // a goroutine is sending pending items
	err      error    // the first failure, kept when there is no onErr
}

func newAcker(c *Client, onErr func(error)) *acker {
	a := &acker{c: c, onErr: onErr}
	a.idle = sync.NewCond(&a.mu)
	return a
}

// add queues items and has them sent as soon as no other ack is in flight.
// done, if not nil, is called once they were answered (or failed).
func (a *acker) add(items []AckItem, done func()) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pending = append(a.pending, items...)
	if done != nil {
		a.done = append(a.done, done)
	}
	if !a.flushing && (len(a.pending) > 0 || len(a.done) > 0) {
		a.flushing = true
		go a.flush()
	}
}

// busy reports whether acks are pending or in flight: their leases still
// hold their partitions, which a pop of the same group cannot get.
func (a *acker) busy() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.flushing
}

// wait returns once every item added so far was answered.
func (a *acker) wait() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for a.flushing {
		a.idle.Wait()
	}
}

// takeErr returns the first failure not handed to a callback, once.
func (a *acker) takeErr() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	err := a.err
	a.err = nil
	return err
}

// flush sends what is pending, one call at a time, until nothing is.
func (a *acker) flush() {
	for {
		a.mu.Lock()
		items, done := a.pending, a.done
		a.pending, a.done = nil, nil
		if len(items) == 0 && len(done) == 0 {
			a.flushing = false
			a.idle.Broadcast()
			a.mu.Unlock()
			return
		}
		a.mu.Unlock()
		if len(items) > 0 {
			a.send(items)
		}
		// Only now may the leases' renewals stop: until the ack was
		// answered, a lapsed lease would have it refused.
		for _, f := range done {
			f()
		}
	}
}

// send makes one ack call and reports what did not succeed. Nothing is
// retried: the sidecar redelivers what was not acked, which keeps delivery
// at least once without second-guessing an answer.
func (a *acker) send(items []AckItem) {
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	res, err := a.c.Ack(ctx, items...)
	if err != nil {
		a.report(&AckError{Items: items, Err: err})
		return
	}
	var failed *AckError
	for _, r := range res.Results {
		if r.Success || r.Code == protocol.ItemAlreadyAcked || r.Index < 0 || r.Index >= len(items) {
			continue // already_acked: an earlier ack settled the message
		}
		if failed == nil {
			failed = &AckError{}
		}
		failed.Items = append(failed.Items, items[r.Index])
		failed.Indexes = append(failed.Indexes, r.Index)
		failed.Codes = append(failed.Codes, r.Code)
	}
	if failed != nil {
		a.report(failed)
	}
}

func (a *acker) report(err *AckError) {
	if a.onErr != nil {
		a.onErr(err)
		return
	}
	a.mu.Lock()
	if a.err == nil {
		a.err = err
	}
	a.mu.Unlock()
}
