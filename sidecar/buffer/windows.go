package buffer

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// refreshWindowsEvery is how often the queues' dedup windows are read
// while PostgreSQL answers, so they are known during an outage.
const refreshWindowsEvery = 5 * time.Second

// windows caches the queues' deduplication windows. A spooled record older
// than its queue's window can no longer be told apart, on replay, from a
// copy that did reach the database before the outage.
type windows struct {
	mu      sync.Mutex
	byQueue map[string]time.Duration
	readAt  time.Time
	warned  bool
}

func (w *windows) due() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return time.Since(w.readAt) >= refreshWindowsEvery
}

func (w *windows) refresh(ctx context.Context, st Store) error {
	ctx, cancel := st.Bound(ctx)
	defer cancel()
	byQueue, err := st.DedupWindows(ctx)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.byQueue, w.readAt = byQueue, time.Now()
	return nil
}

// of is queue's window as last read; known is false before it was.
func (w *windows) of(queue string) (window time.Duration, known bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	window, known = w.byQueue[queue]
	return window, known
}

// exceeded says, when the oldest spooled record is older than the smallest
// window of the queues with records waiting, what that means.
func (w *windows) exceeded(oldest time.Time, queues []string) string {
	if oldest.IsZero() {
		return ""
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	smallest, known := time.Duration(0), false
	for _, q := range queues {
		if d, ok := w.byQueue[q]; ok && (!known || d < smallest) {
			smallest, known = d, true
		}
	}
	age := time.Since(oldest)
	if !known || age <= smallest {
		return ""
	}
	return fmt.Sprintf("the oldest spooled record (%s old) is older than the smallest dedup window of its queues (%s): "+
		"if a copy of it did reach the database, replay will store it again", age.Round(time.Second), smallest)
}

// warnOnce reports whether this is the first time in a row the window is
// exceeded, so the log says it once per episode.
func (w *windows) warnOnce(exceeded bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	first := exceeded && !w.warned
	w.warned = exceeded
	return first
}
