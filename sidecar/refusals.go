package sidecar

import (
	"sync"
	"time"

	"github.com/queenside/queenside/sidecar/store"
)

// refusalLogEvery is how often the same refusal (right and queue) is
// logged: an application that keeps pushing where it may not would
// otherwise fill the log.
const refusalLogEvery = time.Minute

// refusalLog remembers when each refusal was last logged.
type refusalLog struct {
	mu   sync.Mutex
	last map[[2]string]time.Time
}

// due tells whether the refusal of right on queue is to be logged now.
func (l *refusalLog) due(right, queue string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil {
		l.last = map[[2]string]time.Time{}
	}
	k := [2]string{right, queue}
	if t, ok := l.last[k]; ok && now.Sub(t) < refusalLogEvery {
		return false
	}
	l.last[k] = now
	return true
}

// refused counts a refusal PostgreSQL made for want of a grant, and logs
// it at most once a minute per right and queue.
func (s *Server) refused(r store.Refusal) {
	s.metrics.refusals.WithLabelValues(s.store.Role(), r.Right).Inc()
	if s.refusals.due(r.Right, r.Queue, time.Now()) {
		s.log.Warn("refused for want of a grant (logged once a minute per right and queue)", "right", r.Right, "queue", r.Queue, "error", r.Message)
	}
}
