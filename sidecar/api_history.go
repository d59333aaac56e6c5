package sidecar

import (
	"cmp"
	"context"
	"math"
	"net/http"
	"slices"
	"time"

	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/history"
)

// The history the dashboard's charts start from (sidecar/history): sampled
// only while the dashboard is served, so that sidecars without
// --http-addr add no load to the database. Queue figures come from the
// database, so every sidecar samples the same history of the queues; the
// database round trip and the spool are this sidecar's own.

// startHistory starts sampling, once, for the server's lifetime, unless
// the history is off.
func (s *Server) startHistory() {
	if s.opts.HistoryInterval < 0 {
		return
	}
	s.historyOnce.Do(func() { go s.history.Run(s.baseCtx, s.readHistory) })
}

// readHistory reads one sample. What could not be read is a gap (NaN),
// never a zero: a chart must not show an outage as an idle queue. Its
// reads are bounded by the database timeout too, so that a database that
// hangs does not hold a connection of the pool for a whole interval.
func (s *Server) readHistory(ctx context.Context) history.Sample {
	ctx, cancel := s.store.Bound(ctx)
	defer cancel()
	gap := math.NaN()
	// Without a spool its records are 0, as /api/spool says.
	smp := history.Sample{Pushed: gap, Consumed: gap, DatabaseLatencyMs: gap, Popped: float64(s.metrics.popped.Load())}
	if s.buffer != nil {
		smp.SpoolRecords = float64(s.buffer.Stats().Records)
	}
	latency, err := s.store.Ping(ctx)
	if err != nil || !s.ready.Load() {
		return smp
	}
	smp.DatabaseLatencyMs = ms(latency)
	queues, err := s.store.QueueCounters(ctx)
	if err != nil {
		s.log.Debug("history: the queues' counters were not read; this sample has a gap", "error", err)
		return smp
	}
	smp.Pushed, smp.Consumed = 0, 0
	smp.Queues = make([]history.Queue, 0, len(queues))
	for _, q := range queues {
		smp.Pushed += float64(q.Pushed)
		smp.Consumed += float64(q.Consumed)
		hq := history.Queue{Name: q.Queue, Pushed: float64(q.Pushed), Consumed: float64(q.Consumed)}
		for _, g := range q.Groups {
			hq.Groups = append(hq.Groups, history.Group{Name: g.Group, Lag: float64(g.Lag)})
		}
		// Past the bound, the groups that lag most are the ones kept.
		slices.SortStableFunc(hq.Groups, func(a, b history.Group) int { return cmp.Compare(b.Lag, a.Lag) })
		smp.Queues = append(smp.Queues, hq)
	}
	// Past the bound, the largest queues (most messages pushed) are kept.
	slices.SortStableFunc(smp.Queues, func(a, b history.Queue) int { return cmp.Compare(b.Pushed, a.Pushed) })
	return smp
}

// apiHistory answers even before the schema is ready or while the database
// is unreachable: the database round trip and the spool are charted then.
//
// The totals (pushed, consumed) are every queue's; for a token that may not
// read every queue they are the sums of its own queues' instead. The
// sidecar's own figures (its pops, the database round trip, the spool)
// are shown to every token, as /api/spool and /api/cluster show them.
func (s *Server) apiHistory(w http.ResponseWriter, r *http.Request) {
	queue := r.URL.Query().Get("queue")
	acc := s.opts.Tokens.access(r)
	if r.URL.Query().Has("queue") {
		err := protocol.CheckName("queue", queue)
		if err == nil {
			err = acc.need(rightRead, queue)
		}
		if err != nil {
			pe := s.toProtocolError(err)
			writeAPIError(w, apiStatus(pe.Code), pe.Code, pe.Message)
			return
		}
	}
	snap := s.history.Snapshot(queue)
	if !acc.scope.mayEvery(rightRead) {
		snap.Pushed, snap.Consumed = s.scopedTotals(r.Context(), acc.scope, snap)
	}
	writeJSON(w, http.StatusOK, snap)
}

// scopedTotals sums the pushed and consumed series of the queues sc may
// read, at snap's times (a queue's snapshot is taken apart, perhaps a
// sample later). A time when any of them has a gap is a gap; so is every
// time when the queues cannot be listed (the database is out of reach).
func (s *Server) scopedTotals(ctx context.Context, sc Scope, snap history.Snapshot) (pushed, consumed history.Series) {
	pushed, consumed = make(history.Series, len(snap.At)), make(history.Series, len(snap.At))
	at := make(map[time.Time]int, len(snap.At))
	for k, t := range snap.At {
		at[t] = k
		if math.IsNaN(snap.Pushed[k]) {
			pushed[k], consumed[k] = math.NaN(), math.NaN()
		}
	}
	var names []string
	if s.ready.Load() {
		ctx, cancel := s.store.Bound(ctx)
		defer cancel()
		var err error
		if names, err = s.readableQueues(ctx, sc); err != nil {
			names = nil
			for k := range pushed {
				pushed[k], consumed[k] = math.NaN(), math.NaN()
			}
		}
	}
	for _, name := range names {
		q := s.history.Snapshot(name)
		if q.Queue == nil {
			continue // not sampled: new, or past the bound of queues kept
		}
		for i, t := range q.At {
			if k, ok := at[t]; ok {
				pushed[k] += q.Queue.Pushed[i]
				consumed[k] += q.Queue.Consumed[i]
			}
		}
	}
	return pushed, consumed
}
