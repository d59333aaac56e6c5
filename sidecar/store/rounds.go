package store

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
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
	if len(job.pops) > 0 {
		if r, absent, err := s.popOfNoQueue(ctx, job); absent || err != nil {
			return r, err
		}
	}
	job.ctx, job.done = ctx, make(chan roundResult, 1)
	if err := s.rounds.Submit(ctx, job); err != nil {
		return roundResult{}, err
	}
	select {
	case r := <-job.done:
		r.err = TimedOut(ctx, r.err)
		for i := range r.popErrs {
			r.popErrs[i] = TimedOut(ctx, r.popErrs[i])
		}
		return r, nil
	case <-ctx.Done():
		if job.pops != nil {
			go s.releaseUnsent(job)
		}
		return roundResult{}, TimedOut(ctx, ctx.Err())
	}
}

// popOfNoQueue answers a job whose pops name a queue that does not exist:
// they deliver nothing and create nothing (their group's subscription is
// recorded for when it does, queenside.join_group), and its acks, if any,
// are applied alone. absent is false when the queue exists: the job is
// then run in a round. The group looked up is cached for the round.
func (s *Store) popOfNoQueue(ctx context.Context, job *roundJob) (r roundResult, absent bool, err error) {
	p := job.pops[0]
	_, err = s.groupID(ctx, groupKey{p.Queue, p.Group}, p.Mode, p.From)
	switch {
	case err == nil:
		return r, false, nil
	case !errors.Is(err, ErrQueueNotFound):
		return r, false, TimedOut(ctx, err)
	}
	r.pops, r.popErrs = make([]protocol.PopResult, len(job.pops)), make([]error, len(job.pops))
	for i := range r.pops {
		r.pops[i] = protocol.PopResult{Messages: []protocol.Message{}, Leases: []protocol.Lease{}}
	}
	if len(job.acks) > 0 {
		r.ack, r.err = s.Ack(ctx, job.acks)
	}
	return r, true, nil
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
	ctx, cancel := s.Bound(context.Background())
	defer cancel()
	if _, err := s.Release(ctx, ids); err != nil {
		s.log.Warn("could not release the leases of a departed pop; they will expire", "error", err)
	}
}

// newRoundScheduler is the group commit of pops and acks.
func (s *Store) newRoundScheduler() *groupcommit.Scheduler[*roundJob] {
	return groupcommit.New(groupcommit.Config[*roundJob]{
		Workers: roundWorkers, Depth: roundQueueDepth, MaxItems: maxRoundItems, MaxHold: maxHold, Bound: s.Bound,
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
				answers, err = s.runRound(ctx, jobs)
				return err
			})
			telemetry.End(span, err)
			if err != nil {
				return TimedOut(ctx, err)
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
	// An ack carrying a pop: one transaction if it can be. On Citus, pops
	// that lease are sent whole to their workers (routedRound), alone too.
	if len(j.pops) > 0 && (len(j.acks) > 0 || s.routed() && !j.pops[0].AutoAck) {
		var answers []roundResult
		err := againIfAborted(j.ctx, func() (err error) {
			answers, err = s.runRound(j.ctx, []*roundJob{j})
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

// roundPlan is a round's calls: its acks, one call a shard, and its pops,
// grouped by key in order of arrival, each job's requests a range of its
// key's call.
type roundPlan struct {
	jobs     []*roundJob
	groups   []*popGroup
	ackItems []protocol.AckItem
	ackFrom  []int // each job's first item in ackItems
	acks     []*ackCall
	ackRes   protocol.AckResult
}

type popGroup struct {
	reqs  []PopRequest
	jobs  []int // indexes into jobs
	first []int // each job's first request in reqs
	call  *popCall
	err   error // of a routed call that failed (routedRound)
}

func (s *Store) planRound(ctx context.Context, jobs []*roundJob) (*roundPlan, error) {
	pl := &roundPlan{jobs: jobs, ackFrom: make([]int, len(jobs))}
	byKey := map[PopKey]*popGroup{}
	for i, j := range jobs {
		if len(j.acks) > 0 {
			pl.ackFrom[i] = len(pl.ackItems)
			pl.ackItems = append(pl.ackItems, j.acks...)
		}
		if len(j.pops) == 0 {
			continue
		}
		k := j.pops[0].Key()
		g := byKey[k]
		if g == nil {
			g = &popGroup{}
			byKey[k] = g
			pl.groups = append(pl.groups, g)
		}
		g.jobs, g.first = append(g.jobs, i), append(g.first, len(g.reqs))
		g.reqs = append(g.reqs, j.pops...)
	}
	for _, g := range pl.groups {
		c, err := s.newPopCall(ctx, g.reqs)
		if err != nil {
			return nil, err
		}
		g.call = c
	}
	var err error
	pl.acks, pl.ackRes, err = s.newAckCalls(ctx, pl.ackItems)
	return pl, err
}

// leases tells whether every pop of the round leases what it delivers
// (none acks as it goes).
func (pl *roundPlan) leases() bool {
	for _, g := range pl.groups {
		if !g.call.leases() {
			return false
		}
	}
	return true
}

// popAnswers gives each job the results of its pops, and tells whether a
// result is too large for its job. The pops of a group whose call failed
// (routedRound) get its error, and what its calls that committed leased
// is withdrawn.
func (s *Store) popAnswers(ctx context.Context, pl *roundPlan, answers []roundResult) (tooLarge bool, err error) {
	for _, g := range pl.groups {
		res, sizes, err := g.call.results()
		if err == nil && g.err != nil {
			if werr := s.withdraw(ctx, res); werr != nil {
				s.log.Warn("could not withdraw the leases of a failed pop; they will expire", "error", werr)
			}
		}
		if err == nil {
			err = g.err
		}
		for n, i := range g.jobs {
			to := len(g.reqs)
			if n+1 < len(g.first) {
				to = g.first[n+1]
			}
			switch {
			case g.err != nil:
				answers[i].pops, answers[i].popErrs = make([]protocol.PopResult, to-g.first[n]), repeat(err, to-g.first[n])
			case err != nil:
				return false, fmt.Errorf("pop %s: %w", g.reqs[0].Queue, err)
			default:
				answers[i].pops = res[g.first[n]:to]
				answers[i].popErrs = make([]error, to-g.first[n])
				tooLarge = tooLarge || slices.Max(sizes[g.first[n]:to]) > pl.jobs[i].maxBytes
			}
		}
	}
	return tooLarge, nil
}

// jobOfAck gives the job of an item of the round's acks.
func (pl *roundPlan) jobOfAck(item int) int {
	job := 0
	for i, j := range pl.jobs {
		if len(j.acks) > 0 && pl.ackFrom[i] <= item {
			job = i
		}
	}
	return job
}

// ackAnswers gives each job with acks its share of the round's ack answer.
func (pl *roundPlan) ackAnswers(answers []roundResult) {
	for i, j := range pl.jobs {
		if len(j.acks) > 0 {
			answers[i].ack = splitAck(pl.ackRes.Results[pl.ackFrom[i]:pl.ackFrom[i]+len(j.acks)], pl.ackFrom[i], j.acks, pl.ackRes.Leases)
		}
	}
}

// runRound runs jobs as one round: routed to the workers on Citus when
// every pop of it leases (routedRound), in one transaction otherwise
// (fusedRound).
func (s *Store) runRound(ctx context.Context, jobs []*roundJob) ([]roundResult, error) {
	pl, err := s.planRound(ctx, jobs)
	if err != nil {
		return nil, err
	}
	if s.routed() && pl.leases() {
		return s.routedRound(ctx, pl)
	}
	return s.fusedRound(ctx, pl)
}

// fusedRound runs a round's calls in one transaction: every ack, then the
// pops. A pop result that does not fit in its request's limit is taken
// back: the round is rolled back (errTooLarge) when a pop acks as it goes,
// and otherwise its acks stand and its pops are served again alone
// (popAgainAlone).
func (s *Store) fusedRound(ctx context.Context, pl *roundPlan) ([]roundResult, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("consume: %w", err)
	}
	defer s.release(ctx, conn)
	// BEGIN and COMMIT travel with the calls: a round is one round trip,
	// unless a pop acks as it goes (see popOnce) or, on Citus, takes more
	// than one pass (popCall.assign).
	committed := pl.leases()
	for _, g := range pl.groups {
		committed = committed && g.call.final()
	}
	var b pgx.Batch
	s.queueBegin(&b, committed)
	for _, c := range pl.acks {
		b.Queue(ackSQL, c.args(pl.ackItems)...)
	}
	for _, g := range pl.groups {
		g.call.queue(&b)
	}
	if committed {
		b.Queue("COMMIT")
	}
	br := conn.SendBatch(ctx, &b)
	answers := make([]roundResult, len(pl.jobs))
	tooLarge := false
	var passes []*popCall // with passes to come (on Citus)
	err = func() error {
		if err := begun(br, committed); err != nil {
			return err
		}
		for _, c := range pl.acks {
			rows, err := br.Query()
			if err != nil {
				return fmt.Errorf("ack: %w", err)
			}
			if pl.ackRes, err = c.finish(rows, pl.ackRes); err != nil {
				return err
			}
		}
		pl.ackRes = sortLeases(pl.ackRes, len(pl.acks))
		for _, g := range pl.groups {
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
	if err == nil {
		tooLarge, err = s.popAnswers(ctx, pl, answers)
	}
	if err := settle(ctx, conn, committed, !tooLarge, err); err != nil {
		return nil, err
	}
	if tooLarge && !committed {
		return nil, errTooLarge
	}
	s.wakeRewound(pl.ackItems, pl.ackRes)
	pl.ackAnswers(answers)
	if tooLarge {
		s.popAgainAlone(ctx, pl.jobs, answers)
	}
	return answers, nil
}

// routedRound runs a round on Citus whose pops all lease: each of its
// calls is sent whole to the worker of its shard and commits there on its
// own (the worker's commit, one phase), one after the other on one
// connection: the acks, a call a shard, then the pops, a call a shard and
// pass. A call that fails once another committed fails alone: its ack
// items are answered unavailable (nothing of them was done), and the pops
// of its key get its error, what its other calls leased withdrawn. Leases
// and their acks are per partition, so nothing of the protocol rests on a
// round's being one transaction.
func (s *Store) routedRound(ctx context.Context, pl *roundPlan) ([]roundResult, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("consume: %w", err)
	}
	defer s.release(ctx, conn)
	answers := make([]roundResult, len(pl.jobs))
	done := 0 // calls committed
	ackRes, failed, err := s.routedAcks(ctx, conn, pl.ackItems, pl.acks, pl.ackRes, &done, pl.jobOfAck)
	if err != nil {
		return nil, err
	}
	pl.ackRes = ackRes
	for _, g := range pl.groups {
		if err := routedPops(ctx, conn, g.call, &done); err != nil {
			if done == 0 {
				return nil, err
			}
			g.err = err
		}
	}
	tooLarge, err := s.popAnswers(ctx, pl, answers)
	if err != nil {
		return nil, err
	}
	pl.ackAnswers(answers)
	for i, err := range failed {
		answers[i].err = err
	}
	if tooLarge {
		s.popAgainAlone(ctx, pl.jobs, answers)
	}
	return answers, nil
}

// routedAcks runs ack calls one by one through q, each its own transaction
// sent whole to its shard's worker. done counts the calls committed so
// far, by every step of the round: while none did, an error is the
// round's, and it is run again as the scheduler sees fit. After, a call
// the database did not answer answers its items unavailable; one that
// failed on its data is run again a job's items at a time (jobOf gives
// the job of an item), and a job whose items fail again gets the error
// (failed), its items of other calls applied or not as they were.
func (s *Store) routedAcks(ctx context.Context, q querier, items []protocol.AckItem, calls []*ackCall,
	res protocol.AckResult, done *int, jobOf func(item int) int) (_ protocol.AckResult, failed map[int]error, err error) {
	run := func(c *ackCall) error {
		return againIfAborted(ctx, func() error {
			got, err := c.through(ctx, q, items, res)
			if err == nil {
				res = got
			}
			return err
		})
	}
	for _, c := range calls {
		err := run(c)
		switch {
		case err == nil:
			*done++
		case *done == 0:
			return res, nil, err
		case IsUnavailable(err):
			for _, i := range c.sent {
				res.Results[i] = protocol.AckItemResult{Index: i, Code: string(protocol.CodeUnavailable)}
			}
		default:
			byJob := map[int][]int{}
			var jobs []int
			for _, i := range c.sent {
				if byJob[jobOf(i)] == nil {
					jobs = append(jobs, jobOf(i))
				}
				byJob[jobOf(i)] = append(byJob[jobOf(i)], i)
			}
			for _, j := range jobs {
				alone := newAckCall(items, byJob[j])
				alone.route = c.route
				if err := run(alone); err != nil {
					if failed == nil {
						failed = map[int]error{}
					}
					failed[j] = err
				}
			}
		}
	}
	s.wakeRewound(items, res)
	return sortLeases(res, len(calls)), failed, nil
}

// routedPops serves a pop call's passes through conn, each part its own
// transaction sent whole to its shard's worker.
func routedPops(ctx context.Context, conn *pgxpool.Conn, c *popCall, done *int) error {
	for len(c.parts) > 0 {
		for i := range c.parts {
			var b pgx.Batch
			c.queuePart(&b, i)
			br := conn.SendBatch(ctx, &b)
			err := c.readPart(br, i)
			if cerr := br.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			*done++
		}
		c.assign()
	}
	return nil
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
