// Package sidecar is the queenside daemon: the socket listener, connections,
// dispatch of operations to the store, and the HTTP probes.
package sidecar

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/sync/semaphore"

	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/buffer"
	"github.com/queenside/queenside/sidecar/crypt"
	"github.com/queenside/queenside/sidecar/history"
	"github.com/queenside/queenside/sidecar/store"
)

// Version is the sidecar's version, set at build time with -ldflags.
var Version = "0.1.0-dev"

// DefaultMaxFrameMemory is what the frames in flight may hold together
// unless --max-frame-memory says otherwise: eight frames of the largest
// default size, and thousands of ordinary pushes, in a pod's memory.
const DefaultMaxFrameMemory = 128 << 20

// ErrServerClosed is returned by Serve after Shutdown or Close.
var ErrServerClosed = errors.New("sidecar: server closed")

// Options configure a Server.
type Options struct {
	MaxFrameBytes int // frame body limit; default protocol.DefaultMaxFrameBytes
	MaxInFlight   int // requests served at once per connection; default protocol.DefaultMaxInFlight
	// MaxFrameMemory bounds the bytes of the frames read and not yet
	// answered, over every connection; default DefaultMaxFrameMemory, and
	// never below MaxFrameBytes.
	MaxFrameMemory int64
	// FrameBodyTimeout is how long a frame's body may take to arrive once
	// its length was read; default 30 s.
	FrameBodyTimeout time.Duration
	AllowUIDs        []uint32 // peers allowed by SO_PEERCRED; empty allows any
	// Buffer spools pushes while PostgreSQL is unreachable; nil fails them
	// with unavailable instead.
	Buffer *buffer.Buffer
	Logger hclog.Logger
	// ID is the sidecar's id, as hello and the dashboard show it; "" draws
	// a random one. Run gives the one it also names its database sessions by.
	ID string
	// Tokens are the bearer tokens of the dashboard's API: without an
	// admin token every write is refused; with a read token, reads need a
	// token too.
	Tokens Tokens
	// Keys seal and open the payloads of queues with encryptPayloads; nil
	// holds no key (such pushes and pops fail with key_missing).
	Keys *crypt.Keyring
	// HistoryInterval is the time between two samples of the dashboard's
	// history; 0 is history.DefaultInterval, and below 0 keeps no history.
	HistoryInterval time.Duration
}

// Server serves the protocol on any number of listeners.
type Server struct {
	opts    Options
	log     hclog.Logger
	store   *store.Store
	buffer  *buffer.Buffer
	ops     map[string]opSpec
	metrics *metrics
	id      string
	started time.Time

	// baseCtx outlives connections, so a push whose client hung up still
	// finishes its transaction; only Close cancels it.
	baseCtx context.Context
	cancel  context.CancelFunc
	// listenDone is closed when the notification listener has returned.
	listenDone chan struct{}
	ready      atomic.Bool // the schema is migrated and the store may be used
	// readyCh is closed when ready becomes true (readyOnce), for the
	// requests waiting for it; startupErr is why the last attempt to
	// migrate failed (nil when it did not).
	readyCh    chan struct{}
	readyOnce  sync.Once
	startupErr atomic.Pointer[error]
	draining   atomic.Bool
	drained    chan struct{} // closed when draining begins: ends long-polls
	wakes      *wakeHub
	control    *control // maintenance and paused queues, as this sidecar applies them
	refusals   refusalLog
	pops       *popHub
	active     atomic.Int64 // requests being served, across connections
	// lastRequest is when a request was last read (Unix nanoseconds): a
	// drain waits for a quiet moment, so that requests already on their way
	// are answered (draining) rather than cut off.
	lastRequest atomic.Int64

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	// frameMemory is Options.MaxFrameMemory, held by each frame from its
	// length to its answer.
	frameMemory *semaphore.Weighted

	// history is what the dashboard's charts start from, sampled once the
	// dashboard is served (startHistory).
	history     *history.History
	historyOnce sync.Once
}

// New returns a Server over st. It answers unavailable until SetReady.
func New(st *store.Store, opts Options) *Server {
	if opts.MaxFrameBytes <= 0 {
		opts.MaxFrameBytes = protocol.DefaultMaxFrameBytes
	}
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = protocol.DefaultMaxInFlight
	}
	if opts.MaxFrameMemory <= 0 {
		opts.MaxFrameMemory = DefaultMaxFrameMemory
	}
	opts.MaxFrameMemory = max(opts.MaxFrameMemory, int64(opts.MaxFrameBytes))
	if opts.FrameBodyTimeout <= 0 {
		opts.FrameBodyTimeout = defaultFrameBodyTimeout
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.ID == "" {
		opts.ID = uuid.NewString()
	}
	if opts.HistoryInterval == 0 {
		opts.HistoryInterval = history.DefaultInterval
	}
	// With the history off, its empty ring still states the usual interval.
	historyInterval := opts.HistoryInterval
	if historyInterval < 0 {
		historyInterval = history.DefaultInterval
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		opts:        opts,
		log:         opts.Logger,
		store:       st,
		buffer:      opts.Buffer,
		id:          opts.ID,
		started:     time.Now(),
		baseCtx:     ctx,
		cancel:      cancel,
		listeners:   make(map[net.Listener]struct{}),
		frameMemory: semaphore.NewWeighted(opts.MaxFrameMemory),
		conns:       make(map[*conn]struct{}),
		drained:     make(chan struct{}),
		readyCh:     make(chan struct{}),
		wakes:       newWakeHub(),
		control:     newControl(),
		history:     history.New(historyInterval),
	}
	s.pops = newPopHub(s)
	s.ops = s.operations()
	s.metrics = newMetrics(s)
	st.OnLocalPush(s.wakes.wake)
	// Notifications missed while the listener was away are made up for:
	// every waiter looks again, and so does the control state.
	s.listenDone = make(chan struct{})
	go func() {
		defer close(s.listenDone)
		st.Listen(ctx, s.onWake, func() { s.wakes.wakeAll(); s.control.nudge() })
	}()
	go s.runControl(ctx)
	return s
}

// ID is this sidecar's identity, announced by hello.
func (s *Server) ID() string { return s.id }

// Serve accepts connections on ln until Shutdown or Close.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.draining.Load() || s.baseCtx.Err() != nil {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	s.listeners[ln] = struct{}{}
	s.mu.Unlock()
	defer s.forgetListener(ln)

	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.draining.Load() || s.baseCtx.Err() != nil {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, errTooManyFiles) {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.log.Warn("accept failed; retrying", "error", err, "in", backoff)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		c := s.newConn(nc)
		if c == nil {
			continue
		}
		go c.serve()
	}
}

func (s *Server) forgetListener(ln net.Listener) {
	s.mu.Lock()
	delete(s.listeners, ln)
	s.mu.Unlock()
}

// Shutdown stops accepting, tells every connection the sidecar is draining,
// answers new requests with draining, and waits for requests in flight to
// finish (an ack being processed still commits) before closing connections.
// Leases held are not released. If ctx ends first, Shutdown returns its
// error and the caller should Close.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.startDraining()
	for ln := range s.listeners {
		ln.Close()
	}
	for c := range s.conns {
		c.notify(protocol.NoticeDraining)
	}
	s.mu.Unlock()

	// Polled like net/http's Shutdown: requests may start (and be refused
	// with draining) while we wait, which a WaitGroup cannot express. The
	// connections close once nothing is served and nothing has arrived for
	// drainQuiet: a request written just before the notice arrived is still
	// read and answered.
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for s.active.Load() > 0 || time.Since(time.Unix(0, s.lastRequest.Load())) < drainQuiet {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	s.closeConns()
	return nil
}

// drainQuiet is how long a drain waits with no request arriving before it
// closes the connections.
const drainQuiet = 100 * time.Millisecond

// Close stops everything at once: listeners, connections, and the requests
// they were serving.
func (s *Server) Close() error {
	s.mu.Lock()
	s.startDraining()
	s.mu.Unlock()
	s.cancel()
	// The listener's connection is closed before the process may exit:
	// a wait cut short sends the server a cancel request, and a
	// PgBouncer 1.18 whose cancel client vanishes mid-way exits.
	<-s.listenDone
	s.mu.Lock()
	for ln := range s.listeners {
		ln.Close()
	}
	s.mu.Unlock()
	s.closeConns()
	return nil
}

// startDraining refuses new work and ends long-polls; s.mu is held.
func (s *Server) startDraining() {
	if !s.draining.Swap(true) {
		close(s.drained)
	}
}

func (s *Server) closeConns() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.nc.Close()
	}
}
