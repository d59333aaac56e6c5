package sidecar

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/store"
)

// The cluster's control state, maintenance and paused queues, lives in
// PostgreSQL; each sidecar applies a copy. A change is announced on the
// wake channel (store.ControlPayload), and the copy is read again every
// controlRecheck besides, or every controlPoll without a listener, so that
// every sidecar applies a change within two seconds.
const (
	controlRecheck = 10 * time.Second
	controlPoll    = time.Second
)

// control holds this sidecar's copy of the control state.
type control struct {
	state atomic.Pointer[store.Control] // nil until read once

	mu      sync.Mutex
	changed chan struct{} // closed, and replaced, at each change
	kick    chan struct{}
	// began numbers the reads of the state begun; applied is the number
	// of the read applied last. A read begun later saw every change that
	// committed before it began, so an earlier one that ends after it
	// (a recheck under way when a configure committed) is not applied.
	began, applied uint64
}

func newControl() *control {
	return &control{changed: make(chan struct{}), kick: make(chan struct{}, 1)}
}

// pushMaintenance reports whether pushes go to the spool.
func (c *control) pushMaintenance() bool {
	st := c.state.Load()
	return st != nil && st.Maintenance.Push
}

// popPaused reports whether pops of queue deliver nothing: maintenance of
// pops, or the queue's consumption paused.
func (c *control) popPaused(queue string) bool {
	st := c.state.Load()
	return st != nil && (st.Maintenance.Pop || st.Paused[queue])
}

// encrypted reports whether payloads pushed to queue are sealed.
func (c *control) encrypted(queue string) bool {
	st := c.state.Load()
	return st != nil && st.Encrypted[queue]
}

// maintenance is the maintenance state applied, nil before the first read.
func (c *control) maintenance() *protocol.MaintenanceState {
	if st := c.state.Load(); st != nil {
		m := st.Maintenance
		return &m
	}
	return nil
}

// watch returns a channel closed at the next change.
func (c *control) watch() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
}

// begin numbers a read of the state about to begin, for set.
func (c *control) begin() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.began++
	return c.began
}

// set applies next, read by read number read, unless a read begun after it
// was applied already, and reports whether anything changed.
func (c *control) set(read uint64, next store.Control) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if read < c.applied {
		return false
	}
	c.applied = read
	if prev := c.state.Load(); prev != nil && sameControl(*prev, next) {
		return false
	}
	c.state.Store(&next)
	close(c.changed)
	c.changed = make(chan struct{})
	return true
}

func sameControl(a, b store.Control) bool {
	return a.Maintenance.Push == b.Maintenance.Push && a.Maintenance.Pop == b.Maintenance.Pop &&
		sameSet(a.Paused, b.Paused) && sameSet(a.Encrypted, b.Encrypted)
}

func sameSet(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for q := range a {
		if !b[q] {
			return false
		}
	}
	return true
}

// nudge asks the control loop to read the state again now.
func (c *control) nudge() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// refreshControl reads the control state and applies it. A change wakes
// every waiting pop: one paused may now deliver, one waiting may now have
// to stop.
func (s *Server) refreshControl(ctx context.Context) error {
	read := s.control.begin()
	next, err := s.store.ReadControl(ctx)
	if err != nil {
		return err
	}
	if s.control.set(read, next) {
		m := next.Maintenance
		s.log.Info("control state", "maintenance_push", m.Push, "maintenance_pop", m.Pop, "paused_queues", len(next.Paused))
		s.wakes.wakeAll()
		if s.buffer != nil && !m.Push {
			s.buffer.Wake() // replay what maintenance spooled
		}
	}
	return nil
}

// runControl keeps the control state current until ctx ends.
func (s *Server) runControl(ctx context.Context) {
	every := controlRecheck
	if !s.store.Listening() {
		every = controlPoll
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.control.kick:
		case <-t.C:
		}
		if !s.ready.Load() {
			continue
		}
		rctx, cancel := s.store.Bound(ctx)
		if err := s.refreshControl(rctx); err != nil && ctx.Err() == nil {
			s.log.Debug("could not read the control state; keeping the last one", "error", err)
		}
		cancel()
	}
}

// onWake routes a notification: the control channel's, or a queue's.
func (s *Server) onWake(payload string) {
	if payload == store.ControlPayload {
		s.control.nudge()
		return
	}
	s.wakes.wake(payload)
}

// waitWhilePaused holds a pop while its queue's consumption is paused,
// until the pause ends (true: go on and pop) or until (false: answer
// paused).
func (s *Server) waitWhilePaused(ctx context.Context, queue string, until time.Time) bool {
	for {
		changed := s.control.watch()
		if !s.control.popPaused(queue) {
			return true
		}
		wait := time.Until(until)
		if wait <= 0 || s.draining.Load() {
			return false
		}
		timer := time.NewTimer(wait)
		select {
		case <-changed:
		case <-timer.C:
		case <-ctx.Done():
		case <-s.drained:
		}
		timer.Stop()
		if ctx.Err() != nil {
			return false
		}
	}
}

func (s *Server) opMaintenance(ctx context.Context, raw []byte) (any, error) {
	a, err := protocol.DecodeMaintenanceArgs(raw)
	if err != nil {
		return nil, err
	}
	if a.Push == nil && a.Pop == nil {
		read := s.control.begin()
		st, err := s.store.ReadControl(ctx)
		if err != nil {
			return nil, err
		}
		s.control.set(read, st)
		return st.Maintenance, nil
	}
	m, err := s.store.SetMaintenance(ctx, a.Push, a.Pop)
	if err != nil {
		return nil, err
	}
	// This sidecar applies it before answering; the others on the
	// notification, or at their next look.
	if err := s.refreshControl(ctx); err != nil {
		s.log.Warn("maintenance changed, but the new state could not be read back", "error", err)
	}
	return m, nil
}
