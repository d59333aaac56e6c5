package verify

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// FaultKind names a fault the run can inject.
type FaultKind string

const (
	// FaultSidecarKill sends SIGKILL to a random sidecar and starts it
	// again on the same socket and spool directory.
	FaultSidecarKill FaultKind = "sidecar-kill"
	// FaultSidecarTerm sends SIGTERM (a drain) to a random sidecar and
	// starts it again.
	FaultSidecarTerm FaultKind = "sidecar-term"
	// FaultPGRestart stops PostgreSQL with `pg_ctl stop -m immediate`, as a
	// crash would, and starts it again after --pg-down.
	FaultPGRestart FaultKind = "pg-restart"
	// FaultPGFailover stops the primary with `pg_ctl stop -m immediate` and
	// promotes its synchronous standby; the old primary is then rewound
	// (pg_rewind) and follows the new one as its synchronous standby.
	FaultPGFailover FaultKind = "pg-failover"
	// FaultPostgresStall freezes every PostgreSQL process (SIGSTOP), the
	// primary's when there is a standby, for --pg-down, then thaws them
	// (SIGCONT): a host that hangs without closing a connection.
	FaultPostgresStall FaultKind = "postgres-stall"
	// FaultPartition drops, silently and both ways, everything between a
	// random sidecar and PostgreSQL for --pg-down, then lets it through
	// again; the other sidecars and the verifier are not cut off.
	FaultPartition FaultKind = "partition"
	// FaultWorkerRestart stops a random Citus worker with `pg_ctl stop -m
	// immediate` and starts it again after --pg-down; only with --citus.
	FaultWorkerRestart FaultKind = "worker-restart"
	// FaultWorkerStall freezes a random Citus worker for --pg-down, then
	// thaws it; only with --citus.
	FaultWorkerStall FaultKind = "worker-stall"
	// FaultSpoolDiskFull fills a random sidecar's spool volume (a tmpfs the
	// run mounts) a third into a PostgreSQL outage, starts PostgreSQL again
	// with the volume still full, SIGKILLs that sidecar as it replays and
	// starts it on the full volume, waits for every spool to be replayed,
	// and only then frees the volume.
	FaultSpoolDiskFull FaultKind = "spool-disk-full"
	// FaultSpoolDamage SIGKILLs a random sidecar whose spool holds records
	// during a PostgreSQL outage, damages the length of one record in the
	// middle of its largest segment, and starts it again; every record the
	// damage costs must be reported by the sidecar, by name.
	FaultSpoolDamage FaultKind = "spool-damage"
	// FaultConsumerKill makes a random consumer die just after a pop: it
	// acks nothing and releases nothing, so its leases must lapse and the
	// messages come again.
	FaultConsumerKill FaultKind = "consumer-kill"
	// FaultLeaseExpiry makes a random consumer hold a pop's messages past
	// their leases' expiry and only then commit: that commit must fail, and
	// the messages come again.
	FaultLeaseExpiry FaultKind = "lease-expiry"
)

// FaultKinds lists every kind, in the order reports count them.
func FaultKinds() []FaultKind {
	return []FaultKind{FaultSidecarKill, FaultSidecarTerm, FaultPGRestart, FaultPostgresStall, FaultPGFailover, FaultPartition,
		FaultWorkerRestart, FaultWorkerStall, FaultSpoolDiskFull, FaultSpoolDamage, FaultConsumerKill, FaultLeaseExpiry}
}

// plannedFault is one entry of the schedule: a kind, due At after the start.
type plannedFault struct {
	At   time.Duration
	Kind FaultKind
}

// schedule returns the faults of the run in time order: the explicit
// --faults list when given, else the counts fitted to the traffic. Either
// is refused when what was asked for does not fit.
func (c Config) schedule() ([]plannedFault, error) {
	if c.explicitSchedule() {
		plan, err := parseSchedule(c.Faults, c.Duration)
		if err != nil {
			return nil, err
		}
		return plan, c.checkTraffic(plan)
	}
	counts, err := c.fitCounts()
	if err != nil {
		return nil, err
	}
	return c.spreadFaults(counts), nil
}

func (c Config) explicitSchedule() bool { return strings.TrimSpace(c.Faults) != "" }

// hasFailovers tells whether the run fails PostgreSQL over to a standby.
func (c Config) hasFailovers() (bool, error) { return c.schedules(FaultPGFailover) }

// hasPartitions tells whether the run cuts a sidecar off PostgreSQL.
func (c Config) hasPartitions() (bool, error) { return c.schedules(FaultPartition) }

// schedules tells whether the run's schedule has a fault of kind k.
func (c Config) schedules(k FaultKind) (bool, error) {
	plan, err := c.schedule()
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(plan, func(f plannedFault) bool { return f.Kind == k }), nil
}

// parseSchedule reads "kind@duration,kind@duration...".
func parseSchedule(s string, d time.Duration) ([]plannedFault, error) {
	var out []plannedFault
	for entry := range strings.SplitSeq(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		kind, at, ok := strings.Cut(entry, "@")
		if !ok {
			return nil, fmt.Errorf("--faults %q: want kind@time, e.g. sidecar-kill@90s", entry)
		}
		k := FaultKind(strings.TrimSpace(kind))
		if !slices.Contains(FaultKinds(), k) {
			return nil, fmt.Errorf("--faults %q: unknown kind %q (want one of %v)", entry, k, FaultKinds())
		}
		t, err := time.ParseDuration(strings.TrimSpace(at))
		if err != nil {
			return nil, fmt.Errorf("--faults %q: %w", entry, err)
		}
		if t < 0 || t >= d {
			return nil, fmt.Errorf("--faults %q: the time must be within the run's %v", entry, d)
		}
		out = append(out, plannedFault{At: t, Kind: k})
	}
	slices.SortStableFunc(out, func(a, b plannedFault) int { return int(a.At - b.At) })
	return out, nil
}

// spreadFaults orders the faults and times them. The consumer faults come
// first: they are the ones that need the loader pushing, and no slow
// PostgreSQL fault can then delay them past it. Within each of those two
// groups each kind is spread over its own count: the j-th of n faults of a
// kind wants fraction (j+½)/n of the run, and the faults go in the order of
// those wishes, so two PostgreSQL restarts are not side by side. Every fault
// is given its estimated time (faultCost) and the time left over is shared
// evenly between the gaps, inside the margins, so the last fault is done
// before the loader stops.
func (c Config) spreadFaults(counts map[FaultKind]int) []plannedFault {
	type wish struct {
		frac float64
		kind FaultKind
	}
	var wishes []wish
	var busy time.Duration
	for _, k := range FaultKinds() {
		n := counts[k]
		for j := range n {
			wishes = append(wishes, wish{(float64(j) + 0.5) / float64(n), k})
			busy += c.faultCost(k)
		}
	}
	slices.SortStableFunc(wishes, func(a, b wish) int {
		if ta, tb := needsTraffic(a.kind), needsTraffic(b.kind); ta != tb {
			if ta {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.frac, b.frac)
	})
	margin := trafficMargin(c.Duration)
	gap := max(c.Duration-2*margin-busy, 0) / time.Duration(len(wishes)+1)
	out := make([]plannedFault, len(wishes))
	at := margin
	for i, w := range wishes {
		at += gap
		// Truncated, so a fault never starts later than its share allows.
		out[i] = plannedFault{At: at.Truncate(100 * time.Millisecond), Kind: w.kind}
		at += c.faultCost(w.kind)
	}
	return out
}
