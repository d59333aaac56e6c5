package verify

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"sync"
	"syscall"
	"time"
)

// How long the injector waits for what a fault needs.
const (
	orderTakeTimeout = 60 * time.Second  // a consumer to pop something and take the order
	recoveryTimeout  = 120 * time.Second // sidecars healthy and spools replayed after PostgreSQL (or a Citus worker) returns
)

// FaultRecord is one injected fault, as the report gives it.
type FaultRecord struct {
	Kind      FaultKind `json:"kind"`
	PlannedAt float64   `json:"plannedAtSeconds"`
	StartedAt float64   `json:"startedAtSeconds"`
	Took      float64   `json:"tookSeconds"` // until the target serves again (consumer faults: until taken)
	Target    string    `json:"target"`
	Detail    string    `json:"detail"`
	Outcome   string    `json:"outcome,omitempty"` // consumer faults: what became of the messages
	Error     string    `json:"error,omitempty"`   // the fault could not be carried out as planned
	// Skipped says why a fault was not carried out though that is no
	// error: a partition where network namespaces cannot be made.
	Skipped string `json:"skipped,omitempty"`

	// What the loader's pushes went through from the fault's start until
	// the sidecars had recovered, for the faults on processes and the
	// network (not the consumer faults): the longest a push request
	// waited for its answer, and the items answered buffered.
	MaxPushWait *float64 `json:"maxPushWaitSeconds,omitempty"`
	Buffered    *int64   `json:"buffered,omitempty"`
	// SpoolsDrained is, after a restart, a stall or a partition, the time
	// from the database answering again (started, thawed, the link let
	// through) until every sidecar was healthy with an empty spool.
	SpoolsDrained *float64 `json:"spoolsDrainedSeconds,omitempty"`
	// LocksFree is, after a stall or a partition, how long until the rows
	// LockProbe names could all be locked by another session: from the
	// thaw for a stall, from the cut for a partition.
	LocksFree *float64 `json:"locksFreeSeconds,omitempty"`
	LockProbe string   `json:"lockProbe,omitempty"`
	// ReportedLost are the events a spool-damage fault cost, as the
	// sidecar reported them by name: the only gaps a run forgives.
	ReportedLost []LostEvent `json:"reportedLost,omitempty"`

	order  *order
	pushes *pushWindow // open from the start until the sidecars recovered
}

// seconds is d for the report's optional figures.
func seconds(d time.Duration) *float64 {
	s := d.Seconds()
	return &s
}

// injector carries out the schedule, one fault at a time: a fault due while
// the previous one is still running (a sidecar starting, spools replaying)
// waits for it.
type injector struct {
	cfg    Config
	cl     *cluster
	groups []*group
	loader *loader
	rng    *rand.Rand
	start  time.Time
	out    io.Writer
	// traffic is closed once the last consumer fault of the schedule has
	// been carried out (or the injector stopped): until then the loader
	// keeps pushing, past --duration if it must.
	traffic     chan struct{}
	releaseOnce sync.Once

	mu      sync.Mutex
	records []*FaultRecord
}

// errTrafficEnded is the error of a consumer fault whose turn came after
// the loader had stopped. The loader waits for the last consumer fault, so
// only a run that is ending early gets here.
var errTrafficEnded = errors.New("not carried out: the traffic had ended")

func (in *injector) run(ctx context.Context, plan []plannedFault) {
	last := -1
	for i, f := range plan {
		if needsTraffic(f.Kind) {
			last = i
		}
	}
	defer in.releaseTraffic()
	for i, f := range plan {
		if i > last {
			in.releaseTraffic()
		}
		if !sleep(ctx, time.Until(in.start.Add(f.At))) {
			return
		}
		r := &FaultRecord{Kind: f.Kind, PlannedAt: f.At.Seconds(), StartedAt: time.Since(in.start).Seconds()}
		if r.Skipped = in.skipReason(f.Kind); r.Skipped != "" {
			in.record(r)
			continue
		}
		late := in.loader.hasEnded()
		began := time.Now()
		if !needsTraffic(f.Kind) {
			r.pushes = in.loader.watch.open()
		}
		err := in.inject(ctx, r)
		in.recovered(r)
		r.Took = time.Since(began).Seconds()
		if err != nil {
			r.Error = err.Error()
		} else if late {
			r.Detail += "; it started after the traffic had ended"
		}
		in.record(r)
	}
}

func (in *injector) releaseTraffic() { in.releaseOnce.Do(func() { close(in.traffic) }) }

// skipReason says why a fault of kind k cannot be carried out in this run
// though that is no error, or "".
func (in *injector) skipReason(k FaultKind) string {
	if k == FaultPartition && in.cl.net == nil {
		return in.cl.netSkip
	}
	if k == FaultSpoolDiskFull && in.cl.volumes == nil {
		return in.cl.volumeSkip
	}
	return ""
}

// recovered closes r's window on the pushes, once the sidecars have
// recovered from the fault (or the fault has ended otherwise), and
// records what the pushes went through. A fault with more to do once the
// pipeline has recovered (a failover's rewind) calls it early.
func (in *injector) recovered(r *FaultRecord) {
	if r.pushes == nil {
		return
	}
	longest, buffered := in.loader.watch.close(r.pushes)
	r.pushes = nil
	r.MaxPushWait, r.Buffered = seconds(longest), &buffered
}

func errSuffix(e string) string {
	if e == "" {
		return ""
	}
	return " (ERROR: " + e + ")"
}

func (in *injector) inject(ctx context.Context, r *FaultRecord) error {
	switch r.Kind {
	case FaultSidecarKill:
		return in.restartSidecar(ctx, r, syscall.SIGKILL)
	case FaultSidecarTerm:
		return in.restartSidecar(ctx, r, syscall.SIGTERM)
	case FaultPGRestart:
		return in.restartPostgres(ctx, r)
	case FaultPGFailover:
		return in.failoverPostgres(ctx, r)
	case FaultPostgresStall:
		return in.stallPostgres(ctx, r)
	case FaultPartition:
		return in.partitionSidecar(ctx, r)
	case FaultWorkerRestart:
		return in.restartWorker(ctx, r)
	case FaultWorkerStall:
		return in.stallWorker(ctx, r)
	case FaultSpoolDiskFull:
		return in.fillSpoolDisk(ctx, r)
	case FaultSpoolDamage:
		return in.damageSpool(ctx, r)
	case FaultConsumerKill, FaultLeaseExpiry:
		return in.orderConsumer(ctx, r)
	}
	return fmt.Errorf("unknown fault %q", r.Kind)
}

func (in *injector) record(r *FaultRecord) {
	in.mu.Lock()
	in.records = append(in.records, r)
	in.mu.Unlock()
	if r.Skipped != "" {
		fmt.Fprintf(in.out, "%7.1fs  fault  %-14s skipped: %s\n", r.StartedAt, r.Kind, r.Skipped)
		return
	}
	fmt.Fprintf(in.out, "%7.1fs  fault  %-14s %s: %s%s%s\n", r.StartedAt, r.Kind, r.Target, r.Detail, figuresSuffix(r), errSuffix(r.Error))
}

// orderConsumer hands a consumer fault to a random group (a stage or the
// checker) and waits until one of its consumers takes it.
func (in *injector) orderConsumer(ctx context.Context, r *FaultRecord) error {
	g := in.groups[in.rng.IntN(len(in.groups))]
	if in.loader.hasEnded() {
		r.Target = g.label
		return errTrafficEnded
	}
	o := newOrder(r.Kind)
	r.order = o
	r.Target = g.label
	timeout := time.After(orderTakeTimeout)
	select {
	case g.orders <- o:
	case <-timeout:
		return fmt.Errorf("no consumer of %s took the order", g.label)
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-o.taken:
	case <-timeout:
		return fmt.Errorf("no consumer of %s popped anything to carry the order out on", g.label)
	case <-ctx.Done():
		return ctx.Err()
	}
	o.mu.Lock()
	r.Target = o.victim
	r.Detail = fmt.Sprintf("took %d messages of %d leases", o.messages, o.leases)
	o.mu.Unlock()
	if r.Kind == FaultConsumerKill {
		r.Detail += " and died without acking or releasing them"
	} else {
		r.Detail += fmt.Sprintf(" and holds them past their %d s leases before committing", in.cfg.LeaseSeconds)
	}
	return nil
}

// snapshot returns the records so far, in the order they started.
func (in *injector) snapshot() []*FaultRecord {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := append([]*FaultRecord(nil), in.records...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].StartedAt < out[j].StartedAt })
	return out
}

// ordersDone reports whether every consumer fault has been carried out.
func (in *injector) ordersDone() bool {
	for _, r := range in.snapshot() {
		if r.order == nil || r.Error != "" {
			continue
		}
		select {
		case <-r.order.done:
		default:
			return false
		}
	}
	return true
}

// reportedLost is every event the faults so far reported lost.
func (in *injector) reportedLost() []LostEvent {
	var lost []LostEvent
	for _, f := range in.snapshot() {
		lost = append(lost, f.ReportedLost...)
	}
	return lost
}
