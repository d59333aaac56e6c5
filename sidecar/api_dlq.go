package sidecar

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/queenside/queenside/protocol"
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
	if a.Queue != "" {
		if err := protocol.CheckName("queue", a.Queue); err != nil {
			return nil, err
		}
	}
	counts, err := s.store.DLQSummary(ctx, a)
	if err != nil {
		return nil, err
	}
	return asJSON(protocol.DLQSummaryResult{Errors: counts})
}
