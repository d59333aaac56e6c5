package queenside

import (
	"context"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/queenside/queenside/protocol"
)

// Re-exported shapes of the protocol, so users need only this package.
type (
	PushItem     = protocol.PushItem
	PushResult   = protocol.PushResult
	QueueOptions = protocol.QueueOptions
	QueueInfo    = protocol.QueueInfo
	StatsResult  = protocol.StatsResult
	HealthResult = protocol.HealthResult
	HelloResult  = protocol.HelloResult
)

// DefaultQueueOptions are a new queue's options. Configure replaces every
// option, so start from these and change what you need.
func DefaultQueueOptions() QueueOptions { return protocol.DefaultQueueOptions() }

// Payload encodes v as a message payload.
func Payload(v any) (msgpack.RawMessage, error) {
	return protocol.Marshal(v)
}

// Item builds a push item for queue with payload v, in the default
// partition. A nil v is a payload too: msgpack's nil, delivered as such.
func Item(queue string, v any) (PushItem, error) {
	p, err := Payload(v)
	if err != nil {
		return PushItem{}, fmt.Errorf("queenside: encode payload: %w", err)
	}
	return PushItem{Queue: queue, Payload: p}, nil
}

// Hello announces the client and returns what the sidecar says of itself.
// The client keeps its frame limit (MaxFrameBytes), so that a request too
// large for it is refused before it is sent.
func (c *Client) Hello(ctx context.Context, client string) (HelloResult, error) {
	var res HelloResult
	err := c.Call(ctx, protocol.OpHello, protocol.HelloArgs{Protocol: protocol.Version, Client: client}, &res)
	if err == nil && res.MaxFrameBytes > 0 {
		c.maxFrame.Store(int64(res.MaxFrameBytes))
	}
	return res, err
}

// Push stores items and returns one result per item, in order. An item can
// fail alone: check each result's Status. When ctx holds a span, its trace
// context goes in the headers of the items without a traceparent (see
// tracing.go). An item without a queue or a payload is refused before
// anything is sent (see checkPushItems).
func (c *Client) Push(ctx context.Context, items ...PushItem) ([]PushResult, error) {
	if err := checkPushItems(items); err != nil {
		return nil, err
	}
	var res protocol.PushReply
	err := c.Call(ctx, protocol.OpPush, protocol.PushArgs{Items: withTraceContext(ctx, items)}, &res)
	return res.Results, err
}

// Configure replaces every option of queue (creating it if needed) and
// returns the options now in force.
func (c *Client) Configure(ctx context.Context, queue string, opts QueueOptions) (QueueOptions, error) {
	var res protocol.ConfigureResult
	err := c.Call(ctx, protocol.OpConfigure, protocol.ConfigureArgs{Queue: queue, Options: opts}, &res)
	return res.Options, err
}

// Queues lists every queue.
func (c *Client) Queues(ctx context.Context) ([]QueueInfo, error) {
	var res protocol.QueuesResult
	err := c.Call(ctx, protocol.OpQueues, struct{}{}, &res)
	return res.Queues, err
}

// Stats describes the partitions of queue.
func (c *Client) Stats(ctx context.Context, queue string) (StatsResult, error) {
	var res StatsResult
	err := c.Call(ctx, protocol.OpStats, protocol.QueueArgs{Queue: queue}, &res)
	return res, err
}

// Health asks the sidecar for a real database round trip and its state.
func (c *Client) Health(ctx context.Context) (HealthResult, error) {
	var res HealthResult
	err := c.Call(ctx, protocol.OpHealth, struct{}{}, &res)
	return res, err
}

// checkPushItems refuses, as the protocol's invalid_argument, a push whose
// items are not all complete: each needs a queue and a payload (Item(q,
// nil) is one: msgpack's nil). Nothing is sent then: the error names the
// first such item by its index, from 0, and its Details say "local".
func checkPushItems(items []PushItem) error {
	for i, it := range items {
		what := ""
		switch {
		case it.Queue == "":
			what = "queue is required"
		case len(it.Payload) == 0:
			what = "payload is required"
		default:
			continue
		}
		e := protocol.Errorf(protocol.CodeInvalidArgument, "push item %d: %s", i, what)
		e.Details = map[string]any{"local": true, "index": i}
		return e
	}
	return nil
}
