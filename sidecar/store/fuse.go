package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/queenside/queenside/sidecar/groupcommit"
	"github.com/queenside/queenside/sidecar/telemetry"
)

// Group commit of pushes (sidecar/groupcommit): concurrent pushes, from any
// number of connections, share one transaction. A batch touching many
// partitions is heavy, and starts beside a running one at once. Fusing
// changes no outcome: items keep their order (requests in arrival order,
// items in request order, so one request's items for a partition stay
// consecutive), and a transaction id repeated across fused requests is a
// duplicate of the earlier one exactly as if they had run one after the
// other. On Citus only pushes to the same workers fuse, and a worker that
// left a push unanswered is not sent pushes for a while (hungWorkers).
// Measured in BENCHMARKS.md.

const (
	pushWorkers    = 4     // transactions that may run at once
	maxFusedItems  = 10000 // a transaction stops gathering here
	pushQueueDepth = 1024
	// heavyPartitions is how many partitions make a transaction worth
	// running beside another rather than waiting to fuse.
	heavyPartitions = 64
	// maxHold bounds how long gathered requests wait for a running
	// transaction (one stuck on a lock must not stall the rest).
	maxHold = 5 * time.Millisecond
)

type pushJob struct {
	ctx  context.Context
	msgs []Message
	lane string          // the workers msgs lie on, on Citus
	done chan pushResult // buffered: the worker never blocks on a departed caller
	// claim is waiting, then taken by a batch about to send it or
	// withdrawn by a caller that gave up first, never both (see
	// groupcommit.Config.Claim).
	claim atomic.Int32
}

const (
	jobWaiting int32 = iota
	jobTaken
	jobWithdrawn
)

// take claims the job for a batch; false if its caller withdrew it.
func (j *pushJob) take() bool { return j.claim.CompareAndSwap(jobWaiting, jobTaken) }

// withdraw gives the job up; false if a batch took it already (then it may
// have been stored).
func (j *pushJob) withdraw() bool { return j.claim.CompareAndSwap(jobWaiting, jobWithdrawn) }

// ErrNotSent marks the error of a push that never reached the database:
// its caller gave up before a transaction took it, so nothing of it can
// have been stored.
var ErrNotSent = errors.New("not sent to the database")

type pushResult struct {
	out []Outcome
	err error
}

// Push stores msgs and returns an outcome per message, in order, once the
// transaction that holds them committed. An error wraps ErrNotSent when
// nothing of the push reached the database; otherwise, if it is the
// database out of reach (IsUnavailable), the push may have been stored.
// An error of ctx ending is TimedOut's.
func (s *Store) Push(ctx context.Context, msgs []Message) (_ []Outcome, err error) {
	job := &pushJob{ctx: ctx, msgs: msgs, done: make(chan pushResult, 1)}
	if s.routed() {
		workers, refused := s.admitPush(ctx, msgs)
		if refused != nil {
			return nil, refused
		}
		job.lane = strings.Join(workers, " ")
		defer func() { s.hung.learn(workers, err, time.Now(), s.timeout) }()
	}
	if err := s.pushes.Submit(ctx, job); err != nil {
		return nil, fmt.Errorf("push: %w: %w", ErrNotSent, TimedOut(ctx, err))
	}
	select {
	case r := <-job.done:
		if r.err == nil {
			s.wakeLocally(msgs)
		}
		return r.out, TimedOut(ctx, r.err)
	case <-ctx.Done():
		err := TimedOut(ctx, ctx.Err())
		if job.withdraw() {
			err = fmt.Errorf("push: %w: %w", ErrNotSent, err)
		}
		return nil, err
	}
}

// admitPush names the workers msgs lie on, or refuses the push, not sent,
// when one of them is marked hung (hungWorkers). On Citus a push fuses
// only with pushes to the same workers: a transaction over two is as slow
// as the slower (and a two-phase commit), and one whose worker hangs must
// take no push to another down with it.
func (s *Store) admitPush(ctx context.Context, msgs []Message) ([]string, error) {
	ids, shards, err := s.pushShards(ctx, msgs)
	if err != nil {
		return nil, fmt.Errorf("push: %w: %w", ErrNotSent, TimedOut(ctx, err))
	}
	workers := s.workersOf(ids, shards)
	if ok, hung := s.hung.admit(workers, time.Now(), s.timeout); !ok {
		return nil, fmt.Errorf("push: %w: the Citus worker %s left the last push to it unanswered: %w",
			ErrNotSent, hung, &TimeoutError{After: s.timeout})
	}
	return workers, nil
}

// PushReplay stores msgs as Push does, in a transaction of their own that
// no other request joins, and records mark in it (see ReplayMark). The
// spool's replay pushes this way: its batch is made again and again while
// a database is suspect, and fused with live pushes it would take them
// down with it. On Citus a stalled worker fails every transaction that
// touches it, and a live push to a partition on another worker must not
// share one with the replay of a partition on the stalled worker.
func (s *Store) PushReplay(ctx context.Context, msgs []Message, mark ReplayMark) ([]Outcome, error) {
	span := pushSpan([]*pushJob{{ctx: ctx, msgs: msgs}}, len(msgs))
	out, err := s.pushTx(ctx, msgs, &mark)
	telemetry.End(span, err)
	if s.routed() {
		// The replay is never refused for a hung worker: trying it again
		// is its job, and its commit clears the mark.
		if ids, shards, serr := s.pushShards(ctx, msgs); serr == nil {
			s.hung.learn(s.workersOf(ids, shards), TimedOut(ctx, err), time.Now(), s.timeout)
		}
	}
	if err != nil {
		return nil, TimedOut(ctx, err)
	}
	s.wakeLocally(msgs)
	return out, nil
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

// newPushScheduler is the group commit of pushes.
func (s *Store) newPushScheduler() *groupcommit.Scheduler[*pushJob] {
	return groupcommit.New(groupcommit.Config[*pushJob]{
		Workers: pushWorkers, Depth: pushQueueDepth, MaxItems: maxFusedItems, MaxHold: maxHold, Bound: s.Bound,
		Context: func(j *pushJob) context.Context { return j.ctx },
		Claim:   (*pushJob).take,
		Weight:  func(j *pushJob) int { return len(j.msgs) },
		Heavy:   touchesManyPartitions,
		Lane:    func(j *pushJob) string { return j.lane },
		Run:     s.commitFused,
		Alone:   func(j *pushJob) { j.done <- s.pushAlone(j) },
		Fail:    func(j *pushJob, err error) { j.done <- pushResult{err: err} },
		Retry:   retryAlone,
	})
}

// retryAlone tells a failure of a shared transaction after which each
// request is run alone: anything but the database out of reach may be one
// request's data, which must not fail the others.
func retryAlone(err error) bool { return !IsUnavailable(err) }

func touchesManyPartitions(jobs []*pushJob) bool {
	partitions := map[partitionKey]struct{}{}
	for _, j := range jobs {
		for i := range j.msgs {
			partitions[partitionKey{j.msgs[i].Queue, j.msgs[i].Partition}] = struct{}{}
			if len(partitions) >= heavyPartitions {
				return true
			}
		}
	}
	return false
}

// commitFused runs jobs in one transaction and answers each, or returns
// the error that failed it, having answered none.
func (s *Store) commitFused(ctx context.Context, jobs []*pushJob) error {
	var all []Message
	for _, j := range jobs {
		all = append(all, j.msgs...)
	}
	span := pushSpan(jobs, len(all))
	out, err := s.pushTx(ctx, all, nil)
	telemetry.End(span, err)
	if err != nil {
		return TimedOut(ctx, err)
	}
	for _, j := range jobs {
		j.done <- pushResult{out: out[:len(j.msgs):len(j.msgs)]}
		out = out[len(j.msgs):]
	}
	return nil
}

// pushAlone runs one request's push in a transaction of its own.
func (s *Store) pushAlone(j *pushJob) pushResult {
	span := pushSpan([]*pushJob{j}, len(j.msgs))
	out, err := s.pushTx(j.ctx, j.msgs, nil)
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
