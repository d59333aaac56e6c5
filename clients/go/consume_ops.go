package queenside

import (
	"context"
	"fmt"

	"github.com/queenside/queenside/protocol"
)

// Re-exported shapes of consumption.
type (
	PopArgs       = protocol.PopArgs
	PopResult     = protocol.PopResult
	Message       = protocol.Message
	Lease         = protocol.Lease
	AckItem       = protocol.AckItem
	AckResult     = protocol.AckResult
	AckItemResult = protocol.AckItemResult
	LeaseResult   = protocol.LeaseResult
)

// Pop asks for messages. Without AutoAck each leased partition comes with a
// lease that must be acked, renewed or released before it expires.
func (c *Client) Pop(ctx context.Context, args PopArgs) (PopResult, error) {
	var res PopResult
	err := c.Call(ctx, protocol.OpPop, args, &res)
	return res, err
}

// Ack reports messages completed or failed. Check each result's Success.
// Build the items with m.Completed() and m.Failed(reason); AckMessages
// takes popped messages as they are.
func (c *Client) Ack(ctx context.Context, items ...AckItem) (AckResult, error) {
	var res AckResult
	err := c.Call(ctx, protocol.OpAck, protocol.AckArgs{Items: items}, &res)
	return res, err
}

// AckAndPop acks items and pops again in one request: the sidecar applies
// the acks and serves the pop in one transaction, so a consumer's cycle
// costs one round trip and one commit (revision 1.2). The pop's result is
// in res.Pop. The pop comes after the acks in that transaction, so it may
// deliver what they released (the rest of a partition whose lease they
// completed); a long-poll waits once the acks are committed. A sidecar of revision 1.1 ignores the pop:
// AckAndPop then pops on its own. res.PopError, when set, says why the pop
// failed after the acks were applied.
func (c *Client) AckAndPop(ctx context.Context, pop PopArgs, items ...AckItem) (AckResult, error) {
	var res AckResult
	if err := c.Call(ctx, protocol.OpAck, protocol.AckArgs{Items: items, Pop: &pop}, &res); err != nil {
		return res, err
	}
	if res.Pop == nil && res.PopError == nil { // a sidecar before revision 1.2
		p, err := c.Pop(ctx, pop)
		if err != nil {
			return res, err
		}
		res.Pop = &p
	}
	return res, nil
}

// AckMessages acks popped messages completed: ack(pop().messages) in the
// Python and Node clients. A message without a lease (popped with AutoAck)
// has nothing to ack and fails the call before anything is sent.
func (c *Client) AckMessages(ctx context.Context, msgs ...Message) (AckResult, error) {
	items := make([]AckItem, len(msgs))
	for i, m := range msgs {
		if m.LeaseID == "" {
			return AckResult{}, fmt.Errorf("queenside: message %d (%s/%s offset %d) has no lease: it was popped with AutoAck, and there is nothing to ack", i, m.Queue, m.Partition, m.Offset)
		}
		items[i] = m.Completed()
	}
	return c.Ack(ctx, items...)
}

// Completed is m.Completed(): the ack item for a message processed
// successfully.
func Completed(m Message) AckItem { return m.Completed() }

// Failed is m.Failed(reason): the ack item for a message whose processing
// failed; it is delivered again, and its retry budget is charged.
func Failed(m Message, reason string) AckItem { return m.Failed(reason) }

// Renew extends live leases by seconds from now (0: the queue's lease time).
func (c *Client) Renew(ctx context.Context, seconds int, leaseIDs ...string) ([]LeaseResult, error) {
	var res protocol.LeaseResults
	err := c.Call(ctx, protocol.OpRenew, protocol.LeaseIDsArgs{LeaseIDs: leaseIDs, Seconds: seconds}, &res)
	return res.Results, err
}

// Release gives leases back without charging any retry budget.
func (c *Client) Release(ctx context.Context, leaseIDs ...string) ([]LeaseResult, error) {
	var res protocol.LeaseResults
	err := c.Call(ctx, protocol.OpRelease, protocol.LeaseIDsArgs{LeaseIDs: leaseIDs}, &res)
	return res.Results, err
}
