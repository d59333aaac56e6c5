package store

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/queenside/queenside/sidecar/telemetry"
)

// Group commit. Concurrent pushes, from any number of connections, are
// fused into one transaction, so under load one commit (one WAL flush, one
// round trip, one call's fixed cost) carries many requests.
//
// One worker at a time gathers the pushes waiting. It starts its
// transaction at once when none is running (an idle sidecar adds no delay)
// or when what it holds touches many partitions (such transactions are
// heavy, and two running side by side keep PostgreSQL's cores busy).
// Otherwise it keeps gathering until the running transaction ends, or a
// short hold runs out: small transactions one after the other, each as full
// as possible, cost PostgreSQL least. Measured in BENCHMARKS.md.
//
// Fusing changes no outcome: items keep their order (requests in
// arrival order, items in request order, so one request's items for a
// partition stay consecutive), a transaction id repeated across fused
// requests is a duplicate of the earlier one exactly as if they had run one
// after the other, and a request whose data fails a fused transaction is
// retried alone so that it cannot fail anyone else's.

const (
	pushWorkers    = 4     // transactions that may run at once
	maxFusedItems  = 10000 // a transaction stops gathering here
	pushQueueDepth = 1024
	fusedTxTimeout = 30 * time.Second
	// heavyPartitions is how many partitions make a transaction worth
	// running beside another rather than waiting to fuse.
	heavyPartitions = 64
	// maxHold bounds how long gathered pushes wait for a running
	// transaction (one stuck on a lock must not stall the rest).
	maxHold = 5 * time.Millisecond
)

type pushJob struct {
	ctx  context.Context
	msgs []Message
	done chan pushResult // buffered: the worker never blocks on a departed caller
}

type pushResult struct {
	out []Outcome
	err error
}

// Push stores msgs and returns an outcome per message, in order, once the
// transaction that holds them committed.
func (s *Store) Push(ctx context.Context, msgs []Message) ([]Outcome, error) {
	job := &pushJob{ctx: ctx, msgs: msgs, done: make(chan pushResult, 1)}
	select {
	case s.pushes <- job:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case r := <-job.done:
		if r.err == nil {
			s.wakeLocally(msgs)
		}
		return r.out, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// OnLocalPush sets what Push calls, for each queue of a stored push, when
// there is no listener to hear the push's notification: this sidecar's
// own waiting pops are then woken at once, and only other sidecars'
// wait for their next look.
func (s *Store) OnLocalPush(wake func(queue string)) { s.localWake = wake }

func (s *Store) wakeLocally(msgs []Message) {
	if s.listen != nil || s.localWake == nil {
		return
	}
	var last string
	for _, m := range msgs {
		if m.Queue != last { // a push's items are mostly of one queue
			s.localWake(m.Queue)
			last = m.Queue
		}
	}
}

// runPushers serves pushes until ctx ends.
func (s *Store) runPushers(ctx context.Context) {
	for range pushWorkers {
		go s.pushWorker(ctx)
	}
}

// txGate tracks the push transactions running, for gathering workers.
type txGate struct {
	gather  sync.Mutex // held by the one worker gathering
	mu      sync.Mutex
	running int
	ended   chan struct{} // closed when a transaction ends, then replaced
}

func (g *txGate) state() (int, <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ended == nil {
		g.ended = make(chan struct{})
	}
	return g.running, g.ended
}

func (g *txGate) begin() {
	g.mu.Lock()
	g.running++
	g.mu.Unlock()
}

func (g *txGate) end() {
	g.mu.Lock()
	g.running--
	if g.ended != nil {
		close(g.ended)
		g.ended = nil
	}
	g.mu.Unlock()
}

func (s *Store) pushWorker(ctx context.Context) {
	for {
		jobs := s.gatherPushes(ctx)
		if jobs == nil {
			return
		}
		s.gate.begin()
		s.commitFused(jobs)
		s.gate.end()
	}
}

// gatherPushes returns the next transaction's pushes, or nil when ctx ends.
func (s *Store) gatherPushes(ctx context.Context) []*pushJob {
	s.gate.gather.Lock()
	defer s.gate.gather.Unlock()
	var jobs []*pushJob
	items := 0
	partitions := map[partitionKey]struct{}{}
	add := func(j *pushJob) {
		jobs, items = append(jobs, j), items+len(j.msgs)
		for i := range j.msgs {
			partitions[partitionKey{j.msgs[i].Queue, j.msgs[i].Partition}] = struct{}{}
		}
	}
	select {
	case j := <-s.pushes:
		add(j)
	case <-ctx.Done():
		return nil
	}
	var hold <-chan time.Time
	for items < maxFusedItems {
		select { // whatever is already waiting
		case j := <-s.pushes:
			add(j)
			continue
		default:
		}
		running, ended := s.gate.state()
		if running == 0 || len(partitions) >= heavyPartitions {
			break
		}
		if hold == nil {
			t := time.NewTimer(maxHold)
			defer t.Stop()
			hold = t.C
		}
		select {
		case j := <-s.pushes:
			add(j)
		case <-ended:
		case <-hold:
			return jobs
		case <-ctx.Done():
			return jobs
		}
	}
	return jobs
}

// commitFused runs jobs in one transaction and answers each.
func (s *Store) commitFused(jobs []*pushJob) {
	live := jobs[:0]
	for _, j := range jobs {
		if err := j.ctx.Err(); err != nil {
			j.done <- pushResult{err: err} // gave up before anything was written
			continue
		}
		live = append(live, j)
	}
	if len(live) == 0 {
		return
	}
	if len(live) == 1 { // the caller's own deadline bounds its transaction
		live[0].done <- s.pushAlone(live[0])
		return
	}
	var all []Message
	for _, j := range live {
		all = append(all, j.msgs...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), fusedTxTimeout)
	span := pushSpan(live, len(all))
	out, err := s.pushTx(ctx, all)
	telemetry.End(span, err)
	cancel()
	if err != nil && !IsUnavailable(err) {
		// Something in the data failed the whole transaction: find out whose
		// by running each request on its own.
		for _, j := range live {
			j.done <- s.pushAlone(j)
		}
		return
	}
	for _, j := range live {
		r := pushResult{err: err}
		if err == nil {
			r.out, out = out[:len(j.msgs):len(j.msgs)], out[len(j.msgs):]
		}
		j.done <- r
	}
}

// pushAlone runs one request's push in a transaction of its own.
func (s *Store) pushAlone(j *pushJob) pushResult {
	span := pushSpan([]*pushJob{j}, len(j.msgs))
	out, err := s.pushTx(j.ctx, j.msgs)
	telemetry.End(span, err)
	return pushResult{out, err}
}

// pushSpan starts the span of a push transaction. One transaction carries
// the pushes of several requests when they are fused, but a span has one
// parent: the first request's push span is its parent, the others are
// linked both ways (see telemetry.StartDB), so each request's trace shows
// the transaction that stored its items and how many shared it.
func pushSpan(jobs []*pushJob, items int) trace.Span {
	if !telemetry.Enabled() {
		return noSpan
	}
	ctxs := make([]context.Context, len(jobs))
	for i, j := range jobs {
		ctxs[i] = j.ctx
	}
	return telemetry.StartDB(telemetry.DBPush, ctxs, telemetry.MessageCount(items))
}

// noSpan stands for a span while tracing is off.
var noSpan = trace.SpanFromContext(context.Background())
