package store

import (
	"context"
	"time"
)

// Group commit. Concurrent pushes, from any number of connections, are
// fused into one transaction: a handful of workers each take every push
// waiting when they become free, so under load one commit (one WAL flush,
// one round trip) carries many requests, and an idle sidecar adds no delay
// at all. Fusing changes no outcome: items keep their order (requests in
// arrival order, items in request order, so one request's items for a
// partition stay consecutive), a transaction id repeated across fused
// requests is a duplicate of the earlier one exactly as if they had run one
// after the other, and a request whose data fails a fused transaction is
// retried alone so that it cannot fail anyone else's.

const (
	pushWorkers    = 4
	maxFusedItems  = 10000
	pushQueueDepth = 1024
	fusedTxTimeout = 30 * time.Second
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
		return r.out, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// runPushers serves pushes until ctx ends.
func (s *Store) runPushers(ctx context.Context) {
	for range pushWorkers {
		go s.pushWorker(ctx)
	}
}

func (s *Store) pushWorker(ctx context.Context) {
	for {
		var first *pushJob
		select {
		case first = <-s.pushes:
		case <-ctx.Done():
			return
		}
		jobs, n := []*pushJob{first}, len(first.msgs)
	gather: // whatever else is already waiting, without waiting for more
		for n < maxFusedItems {
			select {
			case j := <-s.pushes:
				jobs, n = append(jobs, j), n+len(j.msgs)
			default:
				break gather
			}
		}
		s.commitFused(jobs)
	}
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
		out, err := s.pushTx(live[0].ctx, live[0].msgs)
		live[0].done <- pushResult{out, err}
		return
	}
	var all []Message
	for _, j := range live {
		all = append(all, j.msgs...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), fusedTxTimeout)
	out, err := s.pushTx(ctx, all)
	cancel()
	if err != nil && !IsUnavailable(err) {
		// Something in the data failed the whole transaction: find out whose
		// by running each request on its own.
		for _, j := range live {
			out, err := s.pushTx(j.ctx, j.msgs)
			j.done <- pushResult{out, err}
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
