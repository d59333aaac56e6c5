package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/groupcommit"
	"github.com/queenside/queenside/sidecar/telemetry"
)

// Consumption rounds. Pops and acks are fused as pushes are, by the same
// group commit (sidecar/groupcommit): what waits while a round runs goes
// into the next, one transaction, so that consumers asking at about the
// same moment share one commit, one round trip and each statement's fixed
// cost. A round applies all its acks first, in one call of ack_call (one
// a shard on Citus), then serves its pops, one call of pop_from per PopKey
// (on Citus, per key and shard), so that a pop sees what the acks freed:
// an ack that carries its consumer's next pop (AckPop) is answered as if
// the two came one after the other.
//
// Fusing changes no outcome: pops of one key get partitions in the order
// they arrived, exactly as one after the other; ack calls that name the
// same lease never run at once (a lease is a key of the group commit: the
// later waits for the next round), so each lease's items are applied as if
// every call ran alone, and a pop takes a partition an ack of its round
// released as the next round would. A round that fails on the data of one
// request is run again request by request; one with a pop result too
// large to send keeps its acks and serves its pops again alone.

const (
	roundWorkers    = 4 // rounds that may run at once
	roundQueueDepth = 1024
	// maxRoundItems stops a round gathering more requests, and heavyRound
	// makes one start beside a running one: partitions asked for by its
	// pops and items of its acks.
	maxRoundItems = 20000
	heavyRound    = 40
)

// roundJob is one request: a pop batch of one PopKey, an ack call, or an
// ack call with the pop it carries (AckPop), whose parts then share a
// transaction even when the job runs alone.
type roundJob struct {
	ctx      context.Context
	pops     []PopRequest
	maxBytes int
	acks     []protocol.AckItem
	done     chan roundResult // buffered: the worker never blocks on a departed caller
}

type roundResult struct {
	pops    []protocol.PopResult
	popErrs []error
	ack     protocol.AckResult
	err     error // of the ack call
}

// PopMany serves several pops of one PopKey, in a round: the first request
// gets the partitions whose messages waited longest. It returns each
// request its result or its error.
func (s *Store) PopMany(ctx context.Context, reqs []PopRequest, maxBytes int) ([]protocol.PopResult, []error) {
	r, err := s.round(ctx, &roundJob{pops: reqs, maxBytes: maxBytes})
	if err != nil {
		errs := make([]error, len(reqs))
		for i := range errs {
			errs[i] = err
		}
		return make([]protocol.PopResult, len(reqs)), errs
	}
	return r.pops, r.popErrs
}

// Ack applies an ack call in a round: one cursor update per lease, leases
// locked in (partition, group) order so two rounds cannot deadlock.
func (s *Store) Ack(ctx context.Context, items []protocol.AckItem) (protocol.AckResult, error) {
	r, err := s.round(ctx, &roundJob{acks: items})
	if err != nil {
		return protocol.AckResult{}, err
	}
	return r.ack, r.err
}

// AckPop applies an ack call and serves a pop in one transaction: a
// consumer's cycle in one round trip and one commit. As in any round the
// acks go first, so the pop may deliver what they released (the rest of a
// partition whose lease they completed). err is the ack call's (nothing
// was done); popErr the pop's, after the acks were applied: should the
// data of one fail the transaction, the ack is applied alone and then the
// pop served alone, and a pop result too large to send is served again
// alone with fewer messages.
func (s *Store) AckPop(ctx context.Context, items []protocol.AckItem, pop PopRequest, maxBytes int) (
	ack protocol.AckResult, popped protocol.PopResult, popErr, err error) {
	r, err := s.round(ctx, &roundJob{acks: items, pops: []PopRequest{pop}, maxBytes: maxBytes})
	if err == nil {
		err = r.err
	}
	if err != nil {
		return protocol.AckResult{}, protocol.PopResult{}, nil, err
	}
	return r.ack, r.pops[0], r.popErrs[0], nil
}

func (s *Store) round(ctx context.Context, job *roundJob) (roundResult, error) {
	job.ctx, job.done = ctx, make(chan roundResult, 1)
	if err := s.rounds.Submit(ctx, job); err != nil {
		return roundResult{}, err
	}
	select {
	case r := <-job.done:
		return r, nil
	case <-ctx.Done():
		if job.pops != nil {
			go s.releaseUnsent(job)
		}
		return roundResult{}, ctx.Err()
	}
}

// releaseUnsent gives back the leases a round grants to pops whose callers
// left while it ran, rather than let them wait for their expiry.
func (s *Store) releaseUnsent(job *roundJob) {
	r := <-job.done
	var ids []string
	for _, res := range r.pops {
		for _, l := range res.Leases {
			ids = append(ids, l.LeaseID)
		}
	}
	if len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := s.Release(ctx, ids); err != nil {
		s.log.Warn("could not release the leases of a departed pop; they will expire", "error", err)
	}
}

// newRoundScheduler is the group commit of pops and acks.
func (s *Store) newRoundScheduler() *groupcommit.Scheduler[*roundJob] {
	return groupcommit.New(groupcommit.Config[*roundJob]{
		Workers: roundWorkers, Depth: roundQueueDepth, MaxItems: maxRoundItems, MaxHold: maxHold, Timeout: fusedTxTimeout,
		Context: func(j *roundJob) context.Context { return j.ctx },
		Weight:  (*roundJob).weight,
		Heavy: func(jobs []*roundJob) bool {
			w := 0
			for _, j := range jobs {
				w += j.weight()
			}
			return w >= heavyRound
		},
		Keys: func(j *roundJob) []string {
			keys := make([]string, len(j.acks))
			for i, it := range j.acks {
				keys[i] = it.LeaseID
			}
			return keys
		},
		Run: func(ctx context.Context, jobs []*roundJob) error {
			span := roundSpan(jobs)
			var answers []roundResult
			err := againIfAborted(ctx, func() (err error) {
				answers, err = s.fusedRound(ctx, jobs)
				return err
			})
			telemetry.End(span, err)
			if err != nil {
				return err
			}
			for i, j := range jobs {
				j.done <- answers[i]
			}
			return nil
		},
		Alone: s.runAlone,
		Fail:  func(j *roundJob, err error) { j.done <- unavailableResult(j, err) },
		Retry: retryAlone,
	})
}

// weight is what a request adds to its round: the partitions its pops ask
// for and its ack items.
func (j *roundJob) weight() int {
	w := len(j.acks)
	for _, r := range j.pops {
		w += r.Partitions
	}
	return w
}

// unavailableResult answers every part of j with err: nothing was done.
func unavailableResult(j *roundJob, err error) roundResult {
	return roundResult{err: err, pops: make([]protocol.PopResult, len(j.pops)), popErrs: repeat(err, len(j.pops))}
}

func (s *Store) runAlone(j *roundJob) {
	var r roundResult
	span := roundSpan([]*roundJob{j})
	defer func() {
		if span.IsRecording() {
			telemetry.End(span, errors.Join(append(r.popErrs, r.err)...))
		}
	}()
	if len(j.acks) > 0 && len(j.pops) > 0 { // an ack carrying a pop: one transaction if it can be
		var answers []roundResult
		err := againIfAborted(j.ctx, func() (err error) {
			answers, err = s.fusedRound(j.ctx, []*roundJob{j})
			return err
		})
		switch {
		case err == nil:
			r = answers[0]
			j.done <- r
			return
		case IsUnavailable(err) || j.ctx.Err() != nil:
			r = unavailableResult(j, err)
			j.done <- r
			return
		}
		// The data failed the transaction (or, with auto-ack, the pop's
		// result is too large): each part alone.
	}
	if len(j.acks) > 0 {
		r.err = againIfAborted(j.ctx, func() (err error) {
			r.ack, err = s.ack(j.ctx, j.acks)
			return err
		})
	}
	if len(j.pops) > 0 {
		if r.err != nil {
			r.pops, r.popErrs = make([]protocol.PopResult, len(j.pops)), repeat(r.err, len(j.pops))
		} else {
			r.pops, r.popErrs = s.popAlone(j.ctx, j.pops, j.maxBytes)
		}
	}
	j.done <- r
}

// errTooLarge marks a round rolled back because a pop result would not fit.
var errTooLarge = fmt.Errorf("store: a pop result of the round is too large")

// fusedRound runs jobs in one transaction: every ack in one call, then the
// pops, the pops of each key in one call. A pop result that does not fit
// in its request's limit is taken back: the round is rolled back
// (errTooLarge) when a pop acks as it goes, and otherwise its acks stand
// and its pops are served again alone (popAgainAlone).
func (s *Store) fusedRound(ctx context.Context, jobs []*roundJob) ([]roundResult, error) {
	// The pops, grouped by key in order of arrival: each job's requests
	// are a range of its key's call.
	type popGroup struct {
		reqs  []PopRequest
		jobs  []int // indexes into jobs
		first []int // each job's first request in reqs
		call  *popCall
	}
	var groups []*popGroup
	byKey := map[PopKey]*popGroup{}
	var ackItems []protocol.AckItem
	ackFrom := make([]int, len(jobs))
	for i, j := range jobs {
		if len(j.acks) > 0 {
			ackFrom[i] = len(ackItems)
			ackItems = append(ackItems, j.acks...)
		}
		if len(j.pops) == 0 {
			continue
		}
		k := j.pops[0].Key()
		g := byKey[k]
		if g == nil {
			g = &popGroup{}
			byKey[k] = g
			groups = append(groups, g)
		}
		g.jobs, g.first = append(g.jobs, i), append(g.first, len(g.reqs))
		g.reqs = append(g.reqs, j.pops...)
	}
	for _, g := range groups {
		c, err := s.newPopCall(ctx, g.reqs)
		if err != nil {
			return nil, err
		}
		g.call = c
	}
	acks, ackRes, err := s.newAckCalls(ctx, ackItems)
	if err != nil {
		return nil, err
	}

	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("consume: %w", err)
	}
	defer conn.Release()
	// BEGIN and COMMIT travel with the calls: a round is one round trip,
	// unless a pop acks as it goes (see popOnce) or, on Citus, takes more
	// than one pass (popCall.assign).
	committed := true
	var b pgx.Batch
	b.Queue("BEGIN")
	for _, c := range acks {
		b.Queue(ackSQL, c.args(ackItems)...)
	}
	for _, g := range groups {
		g.call.queue(&b)
		committed = committed && g.call.leases() && g.call.final()
	}
	if committed {
		b.Queue("COMMIT")
	}
	br := conn.SendBatch(ctx, &b)
	answers := make([]roundResult, len(jobs))
	tooLarge := false
	var passes []*popCall // with passes to come (on Citus)
	err = func() error {
		if _, err := br.Exec(); err != nil { // BEGIN
			return err
		}
		for _, c := range acks {
			rows, err := br.Query()
			if err != nil {
				return fmt.Errorf("ack: %w", err)
			}
			if ackRes, err = c.finish(rows, ackRes); err != nil {
				return err
			}
		}
		ackRes = sortLeases(ackRes, len(acks))
		for _, g := range groups {
			more, err := g.call.readPass(br)
			if err != nil {
				return fmt.Errorf("pop %s: %w", g.reqs[0].Queue, err)
			}
			if more {
				passes = append(passes, g.call)
			}
		}
		return nil
	}()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err == nil && len(passes) > 0 {
		err = morePasses(ctx, conn, passes)
	}
	for _, g := range groups {
		if err != nil {
			break
		}
		var res []protocol.PopResult
		var sizes []int
		if res, sizes, err = g.call.results(); err != nil {
			err = fmt.Errorf("pop %s: %w", g.reqs[0].Queue, err)
			break
		}
		for n, i := range g.jobs {
			to := len(g.reqs)
			if n+1 < len(g.first) {
				to = g.first[n+1]
			}
			answers[i].pops = res[g.first[n]:to]
			answers[i].popErrs = make([]error, to-g.first[n])
			tooLarge = tooLarge || slices.Max(sizes[g.first[n]:to]) > jobs[i].maxBytes
		}
	}
	if err := settle(ctx, conn, committed, !tooLarge, err); err != nil {
		return nil, err
	}
	if tooLarge && !committed {
		return nil, errTooLarge
	}
	for i, j := range jobs {
		if len(j.acks) > 0 {
			answers[i].ack = splitAck(ackRes.Results[ackFrom[i]:ackFrom[i]+len(j.acks)], ackFrom[i], j.acks, ackRes.Leases)
		}
	}
	if tooLarge {
		s.popAgainAlone(ctx, jobs, answers)
	}
	return answers, nil
}

// popAgainAlone answers the pops of a committed round of which one result
// is too large to send: the round's acks stand, its pops' leases are
// withdrawn, and each request's pops are served again in a transaction of
// their own, as popAlone serves a result too large.
func (s *Store) popAgainAlone(ctx context.Context, jobs []*roundJob, answers []roundResult) {
	var served []protocol.PopResult
	for _, a := range answers {
		served = append(served, a.pops...)
	}
	err := s.withdraw(ctx, served)
	for i, j := range jobs {
		switch {
		case len(j.pops) == 0:
		case err != nil:
			answers[i].pops = make([]protocol.PopResult, len(j.pops))
			answers[i].popErrs = repeat(fmt.Errorf("consume: withdraw a result too large to send: %w", err), len(j.pops))
		default:
			answers[i].pops, answers[i].popErrs = s.popAlone(j.ctx, j.pops, j.maxBytes)
		}
	}
}

// splitAck is one call's share of a fused call's answer: its items'
// results, numbered from 0 again, and the states of the leases it named,
// in the order the fused answer has them.
func splitAck(results []protocol.AckItemResult, from int, items []protocol.AckItem, leases []protocol.LeaseState) protocol.AckResult {
	out := protocol.AckResult{Results: make([]protocol.AckItemResult, len(results)), Leases: []protocol.LeaseState{}}
	for i, r := range results {
		r.Index -= from
		out.Results[i] = r
	}
	named := map[string]bool{}
	for _, it := range items {
		named[it.LeaseID] = true
	}
	for _, st := range leases {
		if named[st.LeaseID] {
			out.Leases = append(out.Leases, st)
		}
	}
	return out
}

func repeat(err error, n int) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// roundSpan starts the span of a round's transaction, which carries the
// pops and acks of several requests: like a fused push's (pushSpan), its
// parent is the first request's span and the others are linked.
func roundSpan(jobs []*roundJob) trace.Span {
	if !telemetry.Enabled() {
		return noSpan
	}
	ctxs := make([]context.Context, len(jobs))
	pops, acks := 0, 0
	for i, j := range jobs {
		ctxs[i] = j.ctx
		pops += len(j.pops)
		acks += len(j.acks)
	}
	return telemetry.StartDB(telemetry.DBRound, ctxs,
		attribute.Int("queenside.round.pops", pops), attribute.Int("queenside.round.ack_items", acks))
}
