package sidecar

import (
	"context"
	"sync"
	"time"

	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/store"
)

// Pops are served by a loop per store.PopKey (queue, group, partition and
// the options a pop shares with others), not by each request on its own.
// The pops waiting on a key when the loop looks at the database go into
// one call of store.PopMany: those that just arrived, or, after a wake-up,
// every pop still waiting. A push therefore wakes one loop per key on each
// sidecar, which looks once, instead of every waiting pop looking on its
// own; the first pop to arrive gets the partitions that waited longest.
//
// A loop takes the key's wake channel before it looks, so a push that
// commits while it looks is never missed: the loop looks again at once.
// It looks again every recheckInterval without a wake-up too, because
// leases expire and delays elapse without any notification. It ends when
// no pop waits.

// recheckInterval is how often waiting pops are served without a wake-up.
const recheckInterval = time.Second

// popFuseTimeout bounds one call serving several pops, which no single
// request's deadline can bound.
const popFuseTimeout = 30 * time.Second

type popHub struct {
	s     *Server
	mu    sync.Mutex
	loops map[store.PopKey]*popLoop
}

func newPopHub(s *Server) *popHub { return &popHub{s: s, loops: map[store.PopKey]*popLoop{}} }

// popLoop is the pops of one key; its fields are guarded by popHub.mu.
type popLoop struct {
	key     store.PopKey
	waiters []*popWaiter // in arrival order
	kick    chan struct{}
}

type popWaiter struct {
	req   store.PopRequest
	until time.Time // answered empty then, if nothing came
	// fresh: not looked for since the last wake-up, so the next look
	// includes it. inFlight: in the look running now.
	fresh, inFlight bool
	gone            bool // the request ended; its leases are given back
	done            chan popAnswer
}

type popAnswer struct {
	res protocol.PopResult
	err error
}

// pop serves one pop request: at once, and then, while nothing comes,
// each time its queue may have something, until until.
func (h *popHub) pop(ctx context.Context, req store.PopRequest, until time.Time) (protocol.PopResult, error) {
	w := &popWaiter{req: req, until: until, fresh: true, done: make(chan popAnswer, 1)}
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

// run looks for the loop's fresh pops until none waits.
func (h *popHub) run(l *popLoop) {
	recheck := time.NewTimer(recheckInterval)
	defer recheck.Stop()
	for {
		woken := h.s.wakes.watch(l.key.Queue)
		if !h.look(l) {
			return
		}
		h.mu.Lock()
		next := time.Time{}
		for _, w := range l.waiters {
			if next.IsZero() || w.until.Before(next) {
				next = w.until
			}
		}
		anyFresh := false
		for _, w := range l.waiters {
			anyFresh = anyFresh || w.fresh
		}
		h.mu.Unlock()
		if anyFresh {
			continue // arrived during the look
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
		case <-h.s.drained:
			h.refresh(l)
		}
		due.Stop()
	}
}

// refresh marks every waiting pop as worth another look.
func (h *popHub) refresh(l *popLoop) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, w := range l.waiters {
		w.fresh = true
	}
}

// look answers the pops whose time is up, serves the fresh ones with one
// call, and answers those that got messages, or whose time is up, or that
// must not wait because the server drains. It returns false, with the
// loop removed, when no pop waits any more.
func (h *popHub) look(l *popLoop) bool {
	now := time.Now()
	draining := h.s.draining.Load()
	h.mu.Lock()
	var batch []*popWaiter
	kept := l.waiters[:0]
	for _, w := range l.waiters {
		switch {
		case !now.Before(w.until) && !w.fresh:
			w.done <- popAnswer{res: emptyPop()}
		case w.fresh:
			w.fresh, w.inFlight = false, true
			batch = append(batch, w)
			kept = append(kept, w)
		default:
			kept = append(kept, w)
		}
	}
	l.waiters = kept
	if len(l.waiters) == 0 {
		delete(h.loops, l.key)
		h.mu.Unlock()
		return false
	}
	h.mu.Unlock()
	if len(batch) == 0 {
		return true
	}

	reqs := make([]store.PopRequest, len(batch))
	for i, w := range batch {
		reqs[i] = w.req
	}
	ctx, cancel := context.WithTimeout(h.s.baseCtx, popFuseTimeout)
	results, errs := h.s.store.PopMany(ctx, reqs, h.s.opts.MaxFrameBytes)
	cancel()

	now = time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, w := range batch {
		w.inFlight = false
		res, err := results[i], errs[i]
		switch {
		case w.gone:
			// The client left while its leases were being granted: give
			// them back now rather than after they expire.
			if err == nil && len(res.Leases) > 0 {
				go h.s.releaseQuietly(res.Leases)
			}
			w.done <- popAnswer{}
		case err != nil || len(res.Messages) > 0 || !now.Before(w.until) || draining:
			w.done <- popAnswer{res: res, err: err}
		default:
			continue
		}
		l.remove(w)
	}
	return true
}

func emptyPop() protocol.PopResult {
	return protocol.PopResult{Messages: []protocol.Message{}, Leases: []protocol.Lease{}}
}
