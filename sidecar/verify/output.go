package verify

import (
	"io"
	"sync"
)

// lockedWriter lets the progress lines, the fault lines and the monitor
// share the run's output: each write is whole, and none races another.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
