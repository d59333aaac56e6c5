package sidecar

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/store"
)

// The dashboard's bulk actions on dead letters: a filter on the listing
// with its count, the counts by error, and deletion. A replay or a
// deletion by filter is one batch a request, as the ops do: the page asks
// for the next batch with the previous answer's nextAfterId and shows the
// progress in between, so no request holds many rows or runs long.

// dlqFilterQuery reads the filter's keys of revision 1.2 from a listing's
// query string: errorContains, deadFrom and deadTo (RFC 3339), and count.
func dlqFilterQuery(q url.Values, a *protocol.DLQArgs) error {
	a.ErrorContains = q.Get("errorContains")
	if err := protocol.CheckText("errorContains", a.ErrorContains); err != nil {
		return err
	}
	for _, t := range []struct {
		name string
		dst  **time.Time
	}{{"deadFrom", &a.DeadFrom}, {"deadTo", &a.DeadTo}} {
		if v := q.Get(t.name); v != "" {
			at, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return protocol.Errorf(protocol.CodeInvalidArgument, "%s: want an RFC 3339 time, got %q", t.name, v)
			}
			*t.dst = &at
		}
	}
	if a.DeadFrom != nil && a.DeadTo != nil && !a.DeadFrom.Before(*a.DeadTo) {
		return protocol.Errorf(protocol.CodeInvalidArgument, "deadTo: must be after deadFrom")
	}
	switch q.Get("count") {
	case "", "false":
	case "true":
		a.Count = true
	default:
		return protocol.Errorf(protocol.CodeInvalidArgument, "count: want true or false")
	}
	return nil
}

// apiDLQSummary answers dlqSummary: ?queue=&limit=.
func (s *Server) apiDLQSummary(ctx context.Context, r *http.Request) (any, error) {
	q := r.URL.Query()
	limit, err := queryInt(q.Get("limit"), "limit", protocol.DefaultDLQSummary, 1, protocol.MaxDLQSummary)
	if err != nil {
		return nil, err
	}
	a := protocol.DLQSummaryArgs{Queue: q.Get("queue"), Limit: int(limit)}
	acc := s.opts.Tokens.access(r)
	sc := acc.scope
	if a.Queue != "" {
		if err := protocol.CheckName("queue", a.Queue); err != nil {
			return nil, err
		}
		if err := acc.need(rightRead, a.Queue); err != nil {
			return nil, err
		}
	}
	if a.Queue != "" || sc.mayEvery(rightRead) {
		counts, err := s.store.DLQSummary(ctx, a)
		if err != nil {
			return nil, err
		}
		return asJSON(protocol.DLQSummaryResult{Errors: counts})
	}
	// Every queue's, for a token that may not read every queue: each of
	// its queues counted, and the most frequent errors among them kept.
	names, err := s.readableQueues(ctx, sc)
	if err != nil {
		return nil, err
	}
	counts := []protocol.DLQErrorCount{}
	for _, name := range names {
		qa := a
		qa.Queue = name
		c, err := s.store.DLQSummary(ctx, qa)
		if errors.Is(err, store.ErrQueueNotFound) { // deleted meanwhile
			continue
		}
		if err != nil {
			return nil, err
		}
		counts = append(counts, c...)
	}
	slices.SortStableFunc(counts, func(x, y protocol.DLQErrorCount) int {
		return cmp.Or(cmp.Compare(y.Count, x.Count), cmp.Compare(x.Queue, y.Queue), cmp.Compare(x.Group, y.Group), cmp.Compare(x.Error, y.Error))
	})
	if len(counts) > a.Limit {
		counts = counts[:a.Limit]
	}
	return asJSON(protocol.DLQSummaryResult{Errors: counts})
}

// readableQueues lists the queues sc may read, among those the sidecar's
// role may.
func (s *Server) readableQueues(ctx context.Context, sc Scope) ([]string, error) {
	qs, err := s.store.Queues(ctx)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, q := range qs {
		if sc.may(rightRead, q.Queue) {
			names = append(names, q.Queue)
		}
	}
	return names, nil
}

// scopedDLQ is the listing of every queue's dead letters (a.Queue "") for
// a token that may not read every queue: each of its queues listed from
// a.AfterID, the pages merged in id order, as one listing of those queues
// would be; a count is the sum of theirs. It costs a query a queue of the
// token's, where the listing of every queue costs one.
func (s *Server) scopedDLQ(ctx context.Context, sc Scope, a protocol.DLQArgs) (protocol.DLQResult, error) {
	res := protocol.DLQResult{Entries: []protocol.DLQEntry{}}
	names, err := s.readableQueues(ctx, sc)
	if err != nil {
		return res, err
	}
	more := false
	var count, replayed int64
	for _, name := range names {
		qa := a
		qa.Queue = name
		page, err := s.store.DLQ(ctx, qa)
		if errors.Is(err, store.ErrQueueNotFound) { // deleted meanwhile
			continue
		}
		if err != nil {
			return res, err
		}
		res.Entries = append(res.Entries, page.Entries...)
		more = more || page.NextAfterID != nil
		if page.Count != nil {
			count += *page.Count
		}
		if page.ReplayedCount != nil {
			replayed += *page.ReplayedCount
		}
	}
	slices.SortFunc(res.Entries, func(x, y protocol.DLQEntry) int { return cmp.Compare(x.ID, y.ID) })
	if len(res.Entries) > a.Limit {
		res.Entries, more = res.Entries[:a.Limit], true
	}
	if more && len(res.Entries) > 0 {
		next := res.Entries[len(res.Entries)-1].ID
		res.NextAfterID = &next
	}
	if a.Count {
		res.Count, res.ReplayedCount = &count, &replayed
	}
	if err := s.openDeadLetters(res.Entries); err != nil {
		return protocol.DLQResult{}, err
	}
	return res, nil
}

// replaySelection is the selection of a replay's arguments.
func replaySelection(raw []byte) (protocol.DLQSelection, error) {
	a, err := protocol.DecodeDLQReplayArgs(raw)
	return a.DLQSelection, err
}

// managesDeadLetters checks that a replay's or a deletion's token may
// manage the queue of every dead letter it names: the filter's queue, or
// each entry's that the ids name. A selection that reaches any other
// queue is refused whole, and nothing is done: by filter there is no
// selection of every queue (a filter names its queue), and ids come from
// the token's own listings, which show its queues only, so an id of
// another queue is a hand-made or stale request, and doing part of it
// would answer "deleted 3" to a request for 5 without saying why. Bad
// arguments are left to the op, which answers them as it always has.
func (s *Server) managesDeadLetters(decode func([]byte) (protocol.DLQSelection, error)) writeCheck {
	return func(ctx context.Context, r *http.Request, a access) error {
		if a.scope.mayEvery(rightManage) {
			return nil
		}
		raw, err := bodyAsArgs(r, nil)
		if err != nil {
			return nil
		}
		sel, err := decode(raw)
		if err != nil {
			return nil
		}
		if sel.ByFilter() {
			return a.need(rightManage, sel.Queue)
		}
		dls, _, err := s.store.DeadLetters(ctx, sel)
		if err != nil {
			return err
		}
		for _, d := range dls {
			if err := a.need(rightManage, d.Queue); err != nil {
				return err
			}
		}
		return nil
	}
}
