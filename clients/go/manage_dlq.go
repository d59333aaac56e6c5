package queenside

import (
	"context"

	"github.com/queenside/queenside/protocol"
)

// Bulk actions on dead letters (revision 1.2).
type (
	DLQFilter      = protocol.DLQFilter
	DLQSelection   = protocol.DLQSelection
	DLQReplayArgs  = protocol.DLQReplayArgs
	DLQReplayReply = protocol.DLQReplayReply
	DLQDeleteReply = protocol.DLQDeleteReply
	DLQErrorCount  = protocol.DLQErrorCount
)

// DLQReplayBatch replays dead letters named by ids, or one batch of a
// filter: pass the reply's NextAfterID as AfterID for the next batch.
func (c *Client) DLQReplayBatch(ctx context.Context, args DLQReplayArgs) (DLQReplayReply, error) {
	var res DLQReplayReply
	err := c.Call(ctx, protocol.OpDLQReplay, args, &res)
	return res, err
}

// DLQReplayAll replays every dead letter filter matches, a batch at a
// time, calling progress (if not nil) after each; entries replayed already
// are skipped unless includeReplayed. It returns the counts of all batches.
// Stopped and started again, it replays what the first run did not.
func (c *Client) DLQReplayAll(ctx context.Context, filter DLQFilter, includeReplayed bool, progress func(DLQReplayReply)) (DLQReplayReply, error) {
	var total DLQReplayReply
	args := DLQReplayArgs{DLQSelection: DLQSelection{DLQFilter: filter}, IncludeReplayed: &includeReplayed}
	for {
		r, err := c.DLQReplayBatch(ctx, args)
		if err != nil {
			return total, err
		}
		total.Replayed, total.Skipped, total.Failed = total.Replayed+r.Replayed, total.Skipped+r.Skipped, total.Failed+r.Failed
		if progress != nil {
			progress(r)
		}
		if r.NextAfterID == nil {
			return total, nil
		}
		args.AfterID = *r.NextAfterID
	}
}

// DLQDelete deletes dead letters named by ids, or one batch of a filter.
func (c *Client) DLQDelete(ctx context.Context, sel DLQSelection) (DLQDeleteReply, error) {
	var res DLQDeleteReply
	err := c.Call(ctx, protocol.OpDLQDelete, sel, &res)
	return res, err
}

// DLQDeleteAll deletes every dead letter filter matches, a batch at a
// time, and returns how many it deleted.
func (c *Client) DLQDeleteAll(ctx context.Context, filter DLQFilter) (int, error) {
	sel, deleted := DLQSelection{DLQFilter: filter}, 0
	for {
		r, err := c.DLQDelete(ctx, sel)
		deleted += r.Deleted
		if err != nil || r.NextAfterID == nil {
			return deleted, err
		}
		sel.AfterID = *r.NextAfterID
	}
}

// DLQSummary counts the dead letters of queue ("" for every queue) by
// group and error, the most frequent first; limit 0 is the sidecar's
// default (100).
func (c *Client) DLQSummary(ctx context.Context, queue string, limit int) ([]DLQErrorCount, error) {
	var res protocol.DLQSummaryResult
	err := c.Call(ctx, protocol.OpDLQSummary, protocol.DLQSummaryArgs{Queue: queue, Limit: limit}, &res)
	return res.Errors, err
}
