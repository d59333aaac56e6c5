package verify

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
)

// Pacing of the loader.
const (
	generateEvery  = 5 * time.Millisecond  // how often due events are handed to the producers
	minPushSpacing = 20 * time.Millisecond // a producer's pushes start at least this far apart
	maxPushItems   = 1000                  // items per push request
	requestTimeout = 15 * time.Second      // a push, transaction or ack without an answer by then is retried
)

// loader pushes the run's events into queue 1 at the configured rate. It
// has one producer per sidecar, as an application in each pod pushes
// through its own sidecar, and each partition always goes through the same
// producer: the sidecar keeps a partition's order across its spool only
// for what it received itself. A producer whose sidecar is down waits for
// it to come back, as the application of a restarted pod would, and then
// retries with the same transaction ids.
//
// It pushes the events of --duration, and past them, at the same rate,
// while hold is open: the injector keeps it open until the last consumer
// fault of the schedule has been carried out, since those need messages to
// pop, and a fault overrunning its estimate may have delayed them.
type loader struct {
	queue      string
	rate       int
	partitions int
	planned    int64 // the events of --duration
	start      time.Time
	tl         *timeline
	stats      *counters
	producers  []*producer
	confirmed  atomic.Int64
	watch      *pushWatch // each request's wait, for the faults' figures

	hold      <-chan struct{} // nil: no hold
	generated atomic.Int64    // events handed to the producers so far: event k exists iff k < generated
	ended     chan struct{}   // closed once no more events will be generated
	endedAt   atomic.Int64    // when, in nanoseconds since start
}

// producer pushes the events of its partitions through one sidecar, one
// request at a time, so a partition's events reach the sidecar in order.
type producer struct {
	l  *loader
	sc *sidecar

	mu      sync.Mutex
	pending []int64 // event numbers due and not pushed yet, in order
	closed  bool    // no more events will come
	wake    chan struct{}

	client *queenside.Client
}

func newLoader(queue string, cfg Config, sidecars []*sidecar, start time.Time, tl *timeline) *loader {
	l := &loader{queue: queue, rate: cfg.Rate, partitions: cfg.Partitions, planned: cfg.Events(),
		start: start, tl: tl, stats: newCounters(), watch: newPushWatch(), ended: make(chan struct{})}
	for _, s := range sidecars {
		l.producers = append(l.producers, &producer{l: l, sc: s, wake: make(chan struct{}, 1)})
	}
	return l
}

// run pushes every event and returns once all of them are stored or
// spooled, or ctx ends.
func (l *loader) run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, p := range l.producers {
		wg.Go(func() { p.run(ctx) })
	}
	l.generate(ctx)
	wg.Wait()
}

// generate hands event k to its producer at start + k/rate, until the
// planned events are out and nothing holds the traffic.
func (l *loader) generate(ctx context.Context) {
	defer func() {
		l.endedAt.Store(int64(time.Since(l.start)))
		close(l.ended)
		for _, p := range l.producers {
			p.close()
		}
	}()
	var next int64
	t := time.NewTicker(generateEvery)
	defer t.Stop()
	for {
		due := int64(time.Since(l.start).Seconds()*float64(l.rate)) + 1
		if !l.held() {
			due = min(due, max(l.planned, next))
		}
		// Counted before they go out, so an auditor never sees an event
		// that is not counted yet.
		l.generated.Store(max(due, next))
		for ; next < due; next++ {
			p := int(next % int64(l.partitions))
			l.producers[p%len(l.producers)].enqueue(next)
		}
		if next >= l.planned && !l.held() {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// held tells whether a planned fault still needs the traffic.
func (l *loader) held() bool {
	if l.hold == nil {
		return false
	}
	select {
	case <-l.hold:
		return false
	default:
		return true
	}
}

// events is the number of events generated; final once run returned.
func (l *loader) events() int64 { return l.generated.Load() }

// hasEnded tells whether the loader stopped generating events.
func (l *loader) hasEnded() bool {
	select {
	case <-l.ended:
		return true
	default:
		return false
	}
}

func (p *producer) enqueue(k int64) {
	p.mu.Lock()
	p.pending = append(p.pending, k)
	p.mu.Unlock()
	p.signal()
}

func (p *producer) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.signal()
}

func (p *producer) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// take returns up to n pending events, waiting for some; nil once there
// will be no more.
func (p *producer) take(ctx context.Context, n int) []int64 {
	for {
		p.mu.Lock()
		if len(p.pending) > 0 {
			k := min(n, len(p.pending))
			batch := append([]int64(nil), p.pending[:k]...)
			p.pending = p.pending[k:]
			p.mu.Unlock()
			return batch
		}
		closed := p.closed
		p.mu.Unlock()
		if closed {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-p.wake:
		}
	}
}

func (p *producer) run(ctx context.Context) {
	defer func() {
		if p.client != nil {
			p.client.Close()
		}
	}()
	for {
		began := time.Now()
		batch := p.take(ctx, maxPushItems)
		if batch == nil {
			return
		}
		items := make([]queenside.PushItem, len(batch))
		now := time.Now().UnixNano()
		for i, k := range batch {
			e := eventOf(k, p.l.partitions)
			e.pushedAt = now
			payload, err := encodePayload(e)
			if err != nil {
				panic(err) // two integers always encode
			}
			items[i] = queenside.PushItem{Queue: p.l.queue, Partition: partitionName(e.partition),
				Payload: payload, TransactionID: transactionID(1, e.seq)}
		}
		if !p.push(ctx, items) {
			return
		}
		p.l.confirmed.Add(int64(len(items)))
		p.l.tl.add("loader", time.Now(), int64(len(items)))
		sleep(ctx, minPushSpacing-time.Since(began))
	}
}

// push sends items until every one is queued, duplicate or buffered. A
// retry after an unknown outcome sends the same transaction ids, so what
// the first attempt stored comes back duplicate. It returns false only
// when ctx ends.
func (p *producer) push(ctx context.Context, items []queenside.PushItem) bool {
	var b backoff
	for attempt := 0; ; attempt++ {
		if attempt > 0 && !b.wait(ctx) {
			return false
		}
		if p.client == nil {
			dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			c, err := queenside.Dial(dctx, p.sc.socket)
			cancel()
			if err != nil {
				p.l.stats.add("retry:dial", 1)
				continue
			}
			p.client = c
		}
		rctx, cancel := context.WithTimeout(ctx, requestTimeout)
		p.l.watch.sent(p, time.Now())
		res, err := p.client.Push(rctx, items...)
		answeredAt := time.Now()
		cancel()
		if ctx.Err() != nil {
			p.l.watch.abandoned(p)
			return false
		}
		p.l.stats.add("requests", 1)
		ok := err == nil && p.settled(items, res)
		var buffered int64
		if ok {
			buffered = countStatus(res, protocol.StatusBuffered)
		}
		p.l.watch.answered(p, answeredAt, buffered)
		switch classify(err) {
		case errNone:
			if ok {
				return true
			}
			continue
		case errReconnect:
			p.client.Close()
			p.client = nil
		case errUnexpected, errConflict:
			p.l.stats.sample("push through %s: %v", p.sc, err)
			p.l.stats.add("unexpected", 1)
		}
		p.l.stats.add("retry:"+errCode(err), 1)
	}
}

// settled checks a push's results and counts them; false means some item
// was not accepted and the whole request must be sent again.
func (p *producer) settled(items []queenside.PushItem, res []queenside.PushResult) bool {
	if len(res) != len(items) {
		p.l.stats.sample("push of %d items answered %d results", len(items), len(res))
		p.l.stats.add("unexpected", 1)
		return false
	}
	ok := true
	for i, r := range res {
		switch {
		case r.TransactionID != items[i].TransactionID || r.Partition != items[i].Partition:
			p.l.stats.sample("push result %d is for %s/%s, the item was %s/%s", i, r.Partition, r.TransactionID, items[i].Partition, items[i].TransactionID)
			p.l.stats.add("unexpected", 1)
			ok = false
		case r.Status == protocol.StatusFailed:
			code := "unknown"
			if r.Error != nil {
				code = string(r.Error.Code)
				if !r.Error.Retryable {
					p.l.stats.sample("push item %s/%s failed: %v", r.Partition, r.TransactionID, r.Error)
					p.l.stats.add("unexpected", 1)
				}
			}
			p.l.stats.add("failed-item:"+code, 1)
			ok = false
		}
	}
	if !ok {
		return false
	}
	for _, r := range res {
		p.l.stats.add(r.Status, 1)
	}
	if n := countStatus(res, protocol.StatusBuffered); n > 0 {
		p.l.tl.add("buffered", time.Now(), n)
	}
	return true
}

func countStatus(res []queenside.PushResult, status string) int64 {
	var n int64
	for _, r := range res {
		if r.Status == status {
			n++
		}
	}
	return n
}

// extension says, once the loader is done, how far it pushed past
// --duration and why; "" when it did not.
func (l *loader) extension(d time.Duration) string {
	extra := l.events() - l.planned
	if extra <= 0 {
		return ""
	}
	past := time.Duration(l.endedAt.Load()) - d
	return fmt.Sprintf("pushed %.1f s past --duration (%d events more), until the last consumer fault had been carried out", past.Seconds(), extra)
}
