package store

import (
	"errors"
	"sync"
	"time"
)

// Hung workers (Citus). A push whose transaction lay on one worker and was
// not answered within the database timeout marks that worker hung. While
// marked, a push to its partitions is refused at once, not sent, and goes
// to the spool (whose replay keeps trying it), rather than hold one of the
// pool's few connections for the whole timeout while pushes to the other
// workers wait for one. Once a timeout a push is let through to see
// whether the worker answers again; the first push that commits on it
// clears the mark. A push over several workers marks none: which of them
// did not answer is not known.
type hungWorkers struct {
	mu    sync.Mutex
	until map[string]time.Time // worker -> end of the refusal
}

// admit tells whether a push to workers may be sent now, and if not, the
// marked worker that refuses it. A worker whose refusal is over admits
// this push as the one that tries it, and refuses the others for another
// hold.
func (h *hungWorkers) admit(workers []string, now time.Time, hold time.Duration) (ok bool, hung string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, w := range workers {
		if until, marked := h.until[w]; marked && now.Before(until) {
			return false, w
		}
	}
	for _, w := range workers {
		if _, marked := h.until[w]; marked {
			h.until[w] = now.Add(hold)
		}
	}
	return true, ""
}

// learn records how a push to workers ended: committed clears their marks,
// timed out on one worker after it was sent marks it for hold (one that
// timed out before, waiting for the group commit, says nothing of the
// worker).
func (h *hungWorkers) learn(workers []string, err error, now time.Time, hold time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case err == nil:
		for _, w := range workers {
			delete(h.until, w)
		}
	case AsTimeout(err) != nil && !errors.Is(err, ErrNotSent) && len(workers) == 1:
		if h.until == nil {
			h.until = make(map[string]time.Time)
		}
		h.until[workers[0]] = now.Add(hold)
	}
}
