package verify

import (
	"sync"
	"time"
)

// pushWatch follows the loader's push requests on behalf of the faults: a
// fault opens a window at its start and closes it once the sidecars have
// recovered, and the window holds the longest any request waited for its
// answer and the items answered buffered meanwhile. A request is one
// attempt: a retry after an error is a request of its own, so the longest
// wait is what the sidecar (or the client's own request timeout) made a
// producer wait, not the backoff between attempts.
type pushWatch struct {
	mu       sync.Mutex
	inFlight map[*producer]time.Time // when each producer's request now waiting for its answer was sent
	windows  map[*pushWindow]struct{}
}

// pushWindow is what the pushes went through during one fault.
type pushWindow struct {
	from     time.Time
	longest  time.Duration
	buffered int64
}

func newPushWatch() *pushWatch {
	return &pushWatch{inFlight: map[*producer]time.Time{}, windows: map[*pushWindow]struct{}{}}
}

// sent notes that p sent a request at.
func (w *pushWatch) sent(p *producer, at time.Time) {
	w.mu.Lock()
	w.inFlight[p] = at
	w.mu.Unlock()
}

// answered notes that p's request was answered (or failed) at, with
// buffered items answered buffered, and counts it in every open window it
// ends in.
func (w *pushWatch) answered(p *producer, at time.Time, buffered int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	sent, ok := w.inFlight[p]
	if !ok {
		return
	}
	delete(w.inFlight, p)
	for win := range w.windows {
		if at.Before(win.from) {
			continue
		}
		win.longest = max(win.longest, at.Sub(sent))
		win.buffered += buffered
	}
}

// abandoned forgets p's request: the run is ending and no answer will come.
func (w *pushWatch) abandoned(p *producer) {
	w.mu.Lock()
	delete(w.inFlight, p)
	w.mu.Unlock()
}

// open starts a window now.
func (w *pushWatch) open() *pushWindow {
	win := &pushWindow{from: time.Now()}
	w.mu.Lock()
	w.windows[win] = struct{}{}
	w.mu.Unlock()
	return win
}

// close ends win now: a request still unanswered counts with its wait so
// far. It returns the longest wait and the items answered buffered.
func (w *pushWatch) close(win *pushWindow) (time.Duration, int64) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.windows, win)
	for _, sent := range w.inFlight {
		win.longest = max(win.longest, now.Sub(sent))
	}
	return win.longest, win.buffered
}
