package sidecar

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/store"
	"github.com/queenside/queenside/sidecar/telemetry"
)

// A pop looks at the database at once, as a request of the consumption
// rounds (store.PopMany), whose group commit decides what shares a
// transaction. A pop that finds nothing and may wait joins the loop of its
// store.PopKey (queue, group, partition and the options a pop shares with
// others): on a wake-up the loop looks once for every pop waiting on the
// key, in one call of store.PopMany, in the order they arrived, the first
// getting the partitions whose messages waited longest. A push therefore
// wakes one loop per key on each sidecar, which looks once, instead of
// every waiting pop looking on its own.
//
// The loop takes the key's wake channel before it starts looks, so a push
// that commits while they run is never missed: the loop looks again. It
// looks again every recheckInterval without a wake-up too, because leases
// expire and delays elapse without any notification. It ends when no pop
// waits.

// recheckInterval is how often waiting pops are served without a wake-up.
const recheckInterval = time.Second

type popHub struct {
	s     *Server
	mu    sync.Mutex
	loops map[store.PopKey]*popLoop
}

func newPopHub(s *Server) *popHub {
	return &popHub{s: s, loops: map[store.PopKey]*popLoop{}}
}

// popLoop is the pops of one key; its fields are guarded by popHub.mu.
type popLoop struct {
	key     store.PopKey
	waiters []*popWaiter // in arrival order
	looks   int          // running: one at most
	kick    chan struct{}
}

type popWaiter struct {
	req   store.PopRequest
	until time.Time // answered empty then, if nothing came
	// fresh: not looked for since the last wake-up, so the next look
	// includes it. inFlight: in a look running now.
	fresh, inFlight bool
	gone            bool // the request ended; its leases are given back
	// answered: answered empty at until while a look for it still ran
	// (the database slow or silent); that look gives back what it leased.
	answered bool
	done     chan popAnswer
	span     trace.Span // the request's, for the look's database span
}

type popAnswer struct {
	res protocol.PopResult
	err error
}

// pop serves one pop request: at once, and then, while nothing comes, each
// time its queue may have something, until until. Each look is bounded by
// the database timeout.
func (h *popHub) pop(ctx context.Context, req store.PopRequest, until time.Time) (protocol.PopResult, error) {
	return h.lookThenWait(ctx, req, until, func(req store.PopRequest) (protocol.PopResult, error) {
		lctx, cancel := h.s.store.Bound(ctx)
		defer cancel()
		results, errs := h.s.store.PopMany(lctx, []store.PopRequest{req}, h.s.opts.MaxFrameBytes)
		return results[0], errs[0]
	})
}

// lookThenWait serves a pop with a look of its own, then, if it found
// nothing and may wait, in the loop of its key.
func (h *popHub) lookThenWait(ctx context.Context, req store.PopRequest, until time.Time,
	look func(store.PopRequest) (protocol.PopResult, error)) (protocol.PopResult, error) {
	// The wake channel is taken before the look: a push committed during
	// it makes the request look again at once if it waits.
	woken := h.s.wakes.watch(req.Key().Queue)
	res, err := look(req)
	if err != nil || len(res.Messages) > 0 || !time.Now().Before(until) || h.s.draining.Load() {
		if err == nil && len(res.Leases) > 0 && ctx.Err() != nil {
			// The client left while its leases were being granted: give
			// them back now rather than after they expire.
			h.s.releaseQuietly(res.Leases)
			return protocol.PopResult{}, ctx.Err()
		}
		return res, err
	}
	fresh := false
	select {
	case <-woken:
		fresh = true
	default:
	}
	return h.wait(ctx, req, until, fresh)
}

// wait has the loop of the request's key serve it, until until.
func (h *popHub) wait(ctx context.Context, req store.PopRequest, until time.Time, fresh bool) (protocol.PopResult, error) {
	w := &popWaiter{req: req, until: until, fresh: fresh, done: make(chan popAnswer, 1), span: trace.SpanFromContext(ctx)}
	h.mu.Lock()
	l := h.loops[req.Key()]
	if l == nil {
		l = &popLoop{key: req.Key(), kick: make(chan struct{}, 1)}
		h.loops[l.key] = l
		go h.run(l)
	}
	l.waiters = append(l.waiters, w)
	h.mu.Unlock()
	l.kicked()
	select {
	case a := <-w.done:
		return a.res, a.err
	case <-ctx.Done():
		h.mu.Lock()
		inFlight := w.inFlight
		w.gone = true
		if !inFlight {
			l.remove(w)
		}
		h.mu.Unlock()
		if inFlight {
			<-w.done // the look answers, and gives back what it leased
		} else {
			select {
			case a := <-w.done: // answered as the client left
				if len(a.res.Leases) > 0 {
					h.s.releaseQuietly(a.res.Leases)
				}
			default:
			}
		}
		return protocol.PopResult{}, ctx.Err()
	}
}

func (l *popLoop) kicked() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

func (l *popLoop) remove(w *popWaiter) {
	for i, x := range l.waiters {
		if x == w {
			l.waiters = append(l.waiters[:i], l.waiters[i+1:]...)
			return
		}
	}
}

// run starts the loop's looks until no pop waits.
func (h *popHub) run(l *popLoop) {
	recheck := time.NewTimer(recheckInterval)
	defer recheck.Stop()
	drained := h.s.drained
	for {
		woken := h.s.wakes.watch(l.key.Queue)
		next, ok := h.step(l)
		if !ok {
			return
		}
		due := time.NewTimer(time.Until(next))
		select {
		case <-woken:
			h.refresh(l)
		case <-recheck.C:
			recheck.Reset(recheckInterval)
			h.refresh(l)
		case <-l.kick:
		case <-due.C:
		case <-drained:
			drained = nil // once: waiting pops are answered as their looks end
			h.refresh(l)
		}
		due.Stop()
	}
}

// step answers the pops whose time is up, starts the looks the loop may
// start, and returns when the next pop's time is up; false, with the loop
// removed, when no pop waits and no look runs.
func (h *popHub) step(l *popLoop) (time.Time, bool) {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	kept := l.waiters[:0]
	for _, w := range l.waiters {
		switch {
		case w.answered || now.Before(w.until):
		case w.inFlight:
			// Its time is up while a look for it runs on: answered now,
			// as a long-poll must be, and kept for the look to finish.
			w.done <- popAnswer{res: emptyPop()}
			w.answered, w.gone = true, true
		case !w.fresh:
			w.done <- popAnswer{res: emptyPop()}
			continue
		}
		kept = append(kept, w)
	}
	l.waiters = kept
	if len(l.waiters) == 0 && l.looks == 0 {
		delete(h.loops, l.key)
		return time.Time{}, false
	}
	if l.looks == 0 {
		var batch []*popWaiter
		for _, w := range l.waiters {
			if w.fresh && !w.inFlight {
				w.fresh, w.inFlight = false, true
				batch = append(batch, w)
			}
		}
		if len(batch) > 0 {
			l.looks++
			go h.look(l, batch)
		}
	}
	next := now.Add(recheckInterval)
	for _, w := range l.waiters {
		if !w.answered && w.until.Before(next) {
			next = w.until
		}
	}
	return next, true
}

// refresh marks every waiting pop as worth another look.
func (h *popHub) refresh(l *popLoop) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, w := range l.waiters {
		w.fresh = true
	}
}

// look serves batch with one call, and answers those that got messages,
// or whose time is up, or that must not wait because the server drains.
func (h *popHub) look(l *popLoop, batch []*popWaiter) {
	defer l.kicked()
	reqs := make([]store.PopRequest, len(batch))
	for i, w := range batch {
		reqs[i] = w.req
	}
	ctx, cancel := h.s.store.Bound(h.s.baseCtx)
	if telemetry.Enabled() { // the look's database span stands for every pop it serves
		spans := make([]trace.Span, len(batch))
		for i, w := range batch {
			spans[i] = w.span
		}
		ctx = telemetry.ForRequests(ctx, spans)
	}
	results, errs := h.s.store.PopMany(ctx, reqs, h.s.opts.MaxFrameBytes)
	cancel()

	now := time.Now()
	draining := h.s.draining.Load()
	h.mu.Lock()
	defer h.mu.Unlock()
	l.looks--
	for i, w := range batch {
		w.inFlight = false
		res, err := results[i], errs[i]
		switch {
		case w.gone:
			// The client left (or was answered at its time) while its
			// leases were being granted: give them back now rather than
			// after they expire.
			if err == nil && len(res.Leases) > 0 {
				go h.s.releaseQuietly(res.Leases)
			}
			if !w.answered {
				w.done <- popAnswer{}
			}
		case err != nil || len(res.Messages) > 0 || !now.Before(w.until) || draining:
			w.done <- popAnswer{res: res, err: err}
		default:
			continue
		}
		l.remove(w)
	}
}

func emptyPop() protocol.PopResult {
	return protocol.PopResult{Messages: []protocol.Message{}, Leases: []protocol.Lease{}}
}
