// Package groupcommit runs requests in shared transactions. Requests that
// wait at the same moment, from any number of connections, go into one
// batch, run as one transaction: under load one commit (one WAL flush, one
// round trip, one call's fixed cost) carries many requests, and an idle
// sidecar adds no delay.
//
// One worker at a time gathers the requests waiting. It starts its batch at
// once when no batch is running, or when what it holds is heavy (heavy
// batches running side by side keep PostgreSQL's cores busy); otherwise it
// keeps gathering until a running batch ends, or a short hold runs out:
// small transactions one after the other, each as full as possible, cost
// PostgreSQL least. Requests of different lanes (pushes to different
// Citus shards) never share a batch, so that one that cannot commit (its
// shard's worker hangs) takes no other down with it. A request whose keys
// a running batch holds (an ack naming a lease another batch acks) waits
// for that batch to end, so that requests that must not run at once never
// do.
//
// Batching changes no outcome: a batch takes requests in the order they
// came, and its Run applies them as if one after the other. A batch that
// fails for a reason Retry accepts (the data of one request, most often)
// is run again request by request, so that no request can fail another's;
// any other failure (the database out of reach) is every request's.
package groupcommit

import (
	"context"
	"sync"
	"time"
)

// Config is what a Scheduler needs to know of its requests.
type Config[J any] struct {
	Workers  int           // batches that may run at once
	Depth    int           // requests that may wait to be gathered
	MaxItems int           // a batch stops gathering at this weight
	MaxHold  time.Duration // how long a gathered batch waits for a running one

	// Bound bounds the transaction of a batch of several requests, which
	// no single request's deadline can bound.
	Bound   func(context.Context) (context.Context, context.CancelFunc)
	Context func(J) context.Context // the request's own; a request whose context ended is not run
	// Claim, when set, takes a request for the batch about to run it, and
	// reports false for one its caller withdrew (it has its answer), which
	// is then left out: a request is either run or withdrawn, never both,
	// so that a caller that withdrew knows nothing of it was sent.
	Claim  func(J) bool
	Weight func(J) int          // what a request adds toward MaxItems
	Heavy  func(batch []J) bool // a batch worth running beside a running one at once
	Keys   func(J) []string     // held while the request's batch runs; nil: none
	// Lane, when set, keeps requests of different lanes out of one batch:
	// a batch gathers only requests of its first one's lane, and the
	// others wait for the next batch. Nil: one lane.
	Lane func(J) string

	// Run runs the batch in one transaction and answers every request, or
	// returns the error that failed the transaction, having answered none.
	Run func(ctx context.Context, batch []J) error
	// Alone runs one request in a transaction of its own, bounded by its
	// own context, and answers it.
	Alone func(J)
	// Fail answers a request that was not run.
	Fail func(j J, err error)
	// Retry tells a failure of Run after which each request is run alone.
	Retry func(error) bool
}

// Scheduler gathers requests into batches and runs them.
type Scheduler[J any] struct {
	cfg     Config[J]
	waiting chan J

	gather sync.Mutex // held by the one worker gathering

	mu       sync.Mutex
	running  int
	held     map[string]int // keys of running and gathering batches
	deferred []J            // requests whose keys were held, in order of arrival
	ended    chan struct{}  // closed when a batch ends, then replaced
}

// New returns a scheduler; Start sets it going.
func New[J any](cfg Config[J]) *Scheduler[J] {
	return &Scheduler[J]{cfg: cfg, waiting: make(chan J, cfg.Depth), held: map[string]int{}, ended: make(chan struct{})}
}

// Start runs the workers until ctx ends.
func (s *Scheduler[J]) Start(ctx context.Context) {
	for range s.cfg.Workers {
		go s.work(ctx)
	}
}

// Submit hands j to the scheduler; its Run, Alone or Fail will answer it.
// It fails only when ctx ends before j could be taken.
func (s *Scheduler[J]) Submit(ctx context.Context, j J) error {
	select {
	case s.waiting <- j:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Scheduler[J]) work(ctx context.Context) {
	for {
		batch, keys := s.gatherBatch(ctx)
		if batch == nil {
			return
		}
		s.run(batch)
		s.finish(keys)
	}
}

// gatherBatch returns the next batch, counted as running, and the keys it
// holds; nil when ctx ends.
func (s *Scheduler[J]) gatherBatch(ctx context.Context) ([]J, []string) {
	s.gather.Lock()
	defer s.gather.Unlock()
	var batch []J
	var keys []string
	var lane string
	items := 0
	add := func(j J) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if l := s.lane(j); len(batch) == 0 {
			lane = l
		} else if l != lane {
			s.deferred = append(s.deferred, j)
			return
		}
		ks := s.keys(j)
		for _, k := range ks {
			if s.held[k] > 0 {
				s.deferred = append(s.deferred, j)
				return
			}
		}
		for _, k := range ks {
			s.held[k]++
		}
		keys = append(keys, ks...)
		batch, items = append(batch, j), items+s.cfg.Weight(j)
	}
	for len(batch) == 0 { // the first request: one put off earlier, whose keys are free now, or a new one
		for _, j := range s.takeDeferred() {
			add(j)
		}
		if len(batch) > 0 {
			break
		}
		s.mu.Lock()
		ended, putOff := s.ended, len(s.deferred) > 0
		s.mu.Unlock()
		if !putOff {
			ended = nil // nothing to look at again when a batch ends
		}
		select {
		case j := <-s.waiting:
			add(j)
		case <-ended:
		case <-ctx.Done():
			s.release(keys)
			return nil, nil
		}
	}
	var hold <-chan time.Time
	for items < s.cfg.MaxItems {
		select { // whatever is already waiting
		case j := <-s.waiting:
			add(j)
			continue
		default:
		}
		s.mu.Lock()
		running, ended := s.running, s.ended
		s.mu.Unlock()
		if running == 0 || s.cfg.Heavy(batch) {
			break
		}
		if hold == nil {
			t := time.NewTimer(s.cfg.MaxHold)
			defer t.Stop()
			hold = t.C
		}
		select {
		case j := <-s.waiting:
			add(j)
			continue
		case <-ended:
			continue
		case <-hold:
		case <-ctx.Done():
		}
		break
	}
	s.mu.Lock()
	s.running++
	s.mu.Unlock()
	return batch, keys
}

// takeDeferred empties the list of requests put off, for gathering again.
func (s *Scheduler[J]) takeDeferred() []J {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.deferred
	s.deferred = nil
	return d
}

func (s *Scheduler[J]) lane(j J) string {
	if s.cfg.Lane == nil {
		return ""
	}
	return s.cfg.Lane(j)
}

func (s *Scheduler[J]) keys(j J) []string {
	if s.cfg.Keys == nil {
		return nil
	}
	return s.cfg.Keys(j)
}

// finish marks a batch ended and frees its keys.
func (s *Scheduler[J]) finish(keys []string) {
	s.mu.Lock()
	s.running--
	s.mu.Unlock()
	s.release(keys)
}

func (s *Scheduler[J]) release(keys []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		if s.held[k]--; s.held[k] <= 0 {
			delete(s.held, k)
		}
	}
	close(s.ended)
	s.ended = make(chan struct{})
}

// RunBatch runs batch as a worker runs the batches it gathers: requests
// whose context ended are failed, a lone request runs alone, and a batch
// that fails is run again request by request if Retry says so.
func (s *Scheduler[J]) RunBatch(batch []J) { s.run(batch) }

// run runs a batch and answers each of its requests.
func (s *Scheduler[J]) run(batch []J) {
	live := make([]J, 0, len(batch)) // the caller's slice stays as it was
	for _, j := range batch {
		if err := s.cfg.Context(j).Err(); err != nil {
			s.cfg.Fail(j, err) // gave up before anything was written
			continue
		}
		if s.cfg.Claim != nil && !s.cfg.Claim(j) {
			continue // withdrawn
		}
		live = append(live, j)
	}
	switch len(live) {
	case 0:
		return
	case 1: // the request's own deadline bounds its transaction
		s.cfg.Alone(live[0])
		return
	}
	ctx, cancel := s.cfg.Bound(context.Background())
	err := s.cfg.Run(ctx, live)
	cancel()
	switch {
	case err == nil:
	case s.cfg.Retry(err):
		for _, j := range live {
			s.cfg.Alone(j)
		}
	default:
		for _, j := range live {
			s.cfg.Fail(j, err)
		}
	}
}
