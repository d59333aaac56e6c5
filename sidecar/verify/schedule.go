package verify

import (
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
	return []FaultKind{FaultSidecarKill, FaultSidecarTerm, FaultPGRestart, FaultPGFailover, FaultConsumerKill, FaultLeaseExpiry}
}

// plannedFault is one entry of the schedule: a kind, due At after the start.
type plannedFault struct {
	At   time.Duration
	Kind FaultKind
}

// schedule returns the faults of the run in time order: the explicit
// --faults list when given, else the counts spread over the run.
func (c Config) schedule() ([]plannedFault, error) {
	if strings.TrimSpace(c.Faults) != "" {
		return parseSchedule(c.Faults, c.Duration)
	}
	return spreadFaults(map[FaultKind]int{
		FaultSidecarKill:  c.SidecarKills,
		FaultSidecarTerm:  c.SidecarTerms,
		FaultPGRestart:    c.PGRestarts,
		FaultPGFailover:   c.PGFailovers,
		FaultConsumerKill: c.ConsumerKills,
		FaultLeaseExpiry:  c.LeaseExpiries,
	}, c.Duration), nil
}

// hasFailovers tells whether the run fails PostgreSQL over to a standby.
func (c Config) hasFailovers() (bool, error) {
	plan, err := c.schedule()
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(plan, func(f plannedFault) bool { return f.Kind == FaultPGFailover }), nil
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

// spreadFaults places every fault in its own slot, the slots evenly spaced
// over the run, and spreads each kind evenly: the j-th of n faults of a kind
// wants to be at fraction (j+½)/n of the run, and the slots are handed out
// in the order of those wishes. So two PostgreSQL restarts land near a
// quarter and three quarters of the run, not side by side.
func spreadFaults(counts map[FaultKind]int, d time.Duration) []plannedFault {
	type wish struct {
		frac float64
		kind FaultKind
	}
	var wishes []wish
	for _, k := range FaultKinds() {
		n := counts[k]
		for j := range n {
			wishes = append(wishes, wish{(float64(j) + 0.5) / float64(n), k})
		}
	}
	slices.SortStableFunc(wishes, func(a, b wish) int {
		switch {
		case a.frac < b.frac:
			return -1
		case a.frac > b.frac:
			return 1
		}
		return 0
	})
	out := make([]plannedFault, len(wishes))
	for i, w := range wishes {
		// Slots from 1/(n+1) to n/(n+1) of the run: nothing at the very
		// start, when the pipeline fills, or at the end, when it drains.
		at := time.Duration(float64(d) * float64(i+1) / float64(len(wishes)+1))
		out[i] = plannedFault{At: at.Round(100 * time.Millisecond), Kind: w.kind}
	}
	return out
}
