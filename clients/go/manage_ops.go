package queenside

import (
	"context"
	"time"

	"github.com/queenside/queenside/protocol"
)

// Re-exported shapes of the operating operations.
type (
	GroupInfo         = protocol.GroupInfo
	CursorPosition    = protocol.CursorPosition
	DLQArgs           = protocol.DLQArgs
	DLQEntry          = protocol.DLQEntry
	DLQResult         = protocol.DLQResult
	DLQReplayResult   = protocol.DLQReplayResult
	TransactionResult = protocol.TransactionResult
)

// Groups lists the groups of queue ("" for every queue) with their lag.
func (c *Client) Groups(ctx context.Context, queue string) ([]GroupInfo, error) {
	var res protocol.GroupsResult
	err := c.Call(ctx, protocol.OpGroups, protocol.GroupsArgs{Queue: queue}, &res)
	return res.Groups, err
}

// SeekTo says where Seek moves cursors: SeekBeginning, SeekEnd, or
// SeekAt(t), the first message committed at or after t (in each partition).
type SeekTo struct {
	to any // a string or a time.Time, as the protocol takes it
}

var (
	SeekBeginning = SeekTo{protocol.SeekBeginning}
	SeekEnd       = SeekTo{protocol.SeekEnd}
)

// SeekAt moves cursors to the first message committed at or after t.
func SeekAt(t time.Time) SeekTo { return SeekTo{t} }

// Seek moves a group's cursor in partition ("" for every partition of the
// queue) and releases the group's leases there.
func (c *Client) Seek(ctx context.Context, queue, group, partition string, to SeekTo) ([]CursorPosition, error) {
	args := map[string]any{"queue": queue, "group": group, "to": to.to}
	if partition != "" {
		args["partition"] = partition
	}
	var res protocol.SeekResult
	err := c.Call(ctx, protocol.OpSeek, args, &res)
	return res.Cursors, err
}

// DeleteGroup removes a group's cursors; it reports whether the group existed.
func (c *Client) DeleteGroup(ctx context.Context, queue, group string) (bool, error) {
	var res protocol.DeleteGroupResult
	err := c.Call(ctx, protocol.OpDeleteGroup, protocol.GroupArgs{Queue: queue, Group: group}, &res)
	return res.Deleted, err
}

// DLQ lists dead letters, one page; pass NextAfterID as AfterID for the next.
func (c *Client) DLQ(ctx context.Context, args DLQArgs) (DLQResult, error) {
	var res DLQResult
	err := c.Call(ctx, protocol.OpDLQ, args, &res)
	return res, err
}

// DLQReplay pushes dead letters again, each as a new message.
func (c *Client) DLQReplay(ctx context.Context, ids ...int64) ([]DLQReplayResult, error) {
	var res protocol.DLQReplayReply
	err := c.Call(ctx, protocol.OpDLQReplay, protocol.DLQReplayArgs{DLQSelection: protocol.DLQSelection{IDs: ids}}, &res)
	return res.Results, err
}

// Transaction commits acks and pushes together, or nothing: if an ack item
// cannot succeed the error has code conflict, with the ack results in its
// details. The pushes are checked as Push checks its items.
func (c *Client) Transaction(ctx context.Context, acks []AckItem, pushes []PushItem) (TransactionResult, error) {
	var res TransactionResult
	if err := checkPushItems(pushes); err != nil {
		return res, err
	}
	err := c.Call(ctx, protocol.OpTransaction, protocol.TransactionArgs{Acks: acks, Pushes: withTraceContext(ctx, pushes)}, &res)
	return res, err
}

// Maintenance reads the cluster's maintenance state when push and pop are
// both nil, or changes it: a nil one keeps its value. With push on, every
// sidecar on the database spools pushes (answered buffered) instead of
// storing them; with pop on, pops deliver nothing and answer Paused.
func (c *Client) Maintenance(ctx context.Context, push, pop *bool) (protocol.MaintenanceState, error) {
	args := map[string]bool{}
	if push != nil {
		args["push"] = *push
	}
	if pop != nil {
		args["pop"] = *pop
	}
	var res protocol.MaintenanceState
	err := c.Call(ctx, protocol.OpMaintenance, args, &res)
	return res, err
}
