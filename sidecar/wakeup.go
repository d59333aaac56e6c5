package sidecar

import "sync"

// wakeHub lets waiting pops sleep until their queue may have something for
// them. A waiter takes the queue's channel before it looks at the database
// and sleeps on it after: a wake in between closes the channel it holds, so
// no wake is lost.
type wakeHub struct {
	mu    sync.Mutex
	chans map[string]chan struct{}
}

func newWakeHub() *wakeHub { return &wakeHub{chans: make(map[string]chan struct{})} }

// watch returns a channel closed at the next wake of queue.
func (h *wakeHub) watch(queue string) <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	ch := h.chans[queue]
	if ch == nil {
		ch = make(chan struct{})
		h.chans[queue] = ch
	}
	return ch
}

// wake wakes every waiter of queue.
func (h *wakeHub) wake(queue string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ch := h.chans[queue]; ch != nil {
		close(ch)
		delete(h.chans, queue)
	}
}

// wakeAll wakes every waiter, after notifications may have been missed.
func (h *wakeHub) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for q, ch := range h.chans {
		close(ch)
		delete(h.chans, q)
	}
}
