package verify

import (
	"fmt"
	"slices"
	"time"
)

// About how long each part of a fault takes on the 2-core machine the
// verifier runs on. Faults run one after another, so the schedule adds
// these up to see what fits in --duration. They are typical times, not
// bounds (each wait of the injector has its own timeout): a fault that
// overruns delays the next, and the loader then pushes past --duration
// until the last consumer fault is carried out.
const (
	sidecarStartCost   = 3 * time.Second  // a stopped sidecar exited, started again and healthy
	sidecarDrainCost   = 2 * time.Second  // a SIGTERM drain, well under its 10 s grace
	pgRecoveryCost     = 30 * time.Second // after --pg-down: crash recovery (4 to 32 s measured) and the spools' replay
	pgFailoverCost     = 40 * time.Second // promotion and replay take seconds; rewinding the old primary and streaming it again the rest
	workerRecoveryCost = 40 * time.Second // after --pg-down: a worker's crash recovery, and the replay waits for its in-doubt prepared transactions, resolved every citus.recover_2pc_interval (1 min); 1 to 37 s measured
	stallRecoveryCost  = 10 * time.Second // after --pg-down: no crash recovery, every spool's replay; 1 to 2 s measured
	partitionCost      = 10 * time.Second // after --pg-down: the sidecar's connections found dead and made again, its spool replayed; under 1 s measured
	workerStallCost    = 20 * time.Second // after --pg-down: no crash recovery, the replay of the partitions on the worker's shards; 1 s measured in a short run
	spoolDiskCost      = 40 * time.Second // after --pg-down: crash recovery, a sidecar killed and started on the full volume, every spool's replay
	orderTakeCost      = 3 * time.Second  // a consumer fault: the next pop that returns messages
	refusedCommit      = time.Second      // a lease-expiry's late commit, refused
)

// faultCost is about how long a fault of kind k takes, from its start until
// the injector can start the next one.
func (c Config) faultCost(k FaultKind) time.Duration {
	lease := time.Duration(c.LeaseSeconds) * time.Second
	switch k {
	case FaultSidecarKill:
		return c.SidecarDown + sidecarStartCost
	case FaultSidecarTerm:
		return sidecarDrainCost + c.SidecarDown + sidecarStartCost
	case FaultPGRestart:
		return c.PGDown + pgRecoveryCost // the outage kills happen inside
	case FaultPGFailover:
		return pgFailoverCost
	case FaultWorkerRestart:
		return c.PGDown + workerRecoveryCost
	case FaultPostgresStall:
		return c.PGDown + stallRecoveryCost
	case FaultPartition:
		return c.PGDown + partitionCost
	case FaultWorkerStall:
		return c.PGDown + workerStallCost
	case FaultSpoolDiskFull, FaultSpoolDamage:
		return c.PGDown + spoolDiskCost
	case FaultConsumerKill:
		return orderTakeCost + lease // its leases lapse before its messages come again
	case FaultLeaseExpiry:
		return orderTakeCost + lease + expiryOverhang + refusedCommit
	}
	return 0
}

// needsTraffic tells the kinds that act on a pop that returns messages, so
// need the loader still pushing; the others act on processes and work
// with or without traffic.
func needsTraffic(k FaultKind) bool {
	return k == FaultConsumerKill || k == FaultLeaseExpiry
}

// trafficMargin is kept free of faults at the start of the run, while the
// pipeline fills, and at its end, so that a consumer fault running a little
// late still has messages to pop.
func trafficMargin(d time.Duration) time.Duration {
	return min(max(d/20, 3*time.Second), 30*time.Second)
}

// countFlags names each kind's count flag, for the refusals. A partition
// fault's is --network-partitions: --partitions counts a queue's
// partitions.
var countFlags = map[FaultKind]string{
	FaultSidecarKill: "sidecar-kills", FaultSidecarTerm: "sidecar-terms", FaultPGRestart: "pg-restarts",
	FaultPostgresStall: "postgres-stalls", FaultPGFailover: "pg-failovers", FaultPartition: "network-partitions",
	FaultWorkerRestart: "worker-restarts", FaultWorkerStall: "worker-stalls",
	FaultSpoolDiskFull: "spool-disk-fulls", FaultSpoolDamage: "spool-damages",
	FaultConsumerKill: "consumer-kills", FaultLeaseExpiry: "lease-expiries",
}

// CountFlag is the flag of `queenside verify` that sets the count of kind.
func CountFlag(k FaultKind) string { return countFlags[k] }

func (c Config) counts() map[FaultKind]int {
	return map[FaultKind]int{
		FaultSidecarKill: c.SidecarKills, FaultSidecarTerm: c.SidecarTerms, FaultPGRestart: c.PGRestarts,
		FaultPostgresStall: c.PostgresStalls, FaultPGFailover: c.PGFailovers, FaultPartition: c.NetworkPartitions,
		FaultWorkerRestart: c.WorkerRestarts, FaultWorkerStall: c.WorkerStalls,
		FaultSpoolDiskFull: c.SpoolDiskFulls, FaultSpoolDamage: c.SpoolDamages,
		FaultConsumerKill: c.ConsumerKills, FaultLeaseExpiry: c.LeaseExpiries,
	}
}

// fitCounts returns how many faults of each kind the run places, so that
// all of them, one after another, fit between the margins of the traffic.
// A kind in ExactCounts gets its count or the run is refused; every other
// count is at most its setting, the faults added one at a time, to the kind
// with the smallest share of its count so far (the quicker kind on a tie, so
// a short run has more kinds), while they fit.
func (c Config) fitCounts() (map[FaultKind]int, error) {
	want := c.counts()
	room := c.Duration - 2*trafficMargin(c.Duration)
	got := map[FaultKind]int{}
	var used time.Duration
	for _, k := range FaultKinds() {
		if n := want[k]; n > 0 && slices.Contains(c.ExactCounts, k) {
			cost := c.faultCost(k)
			if used+time.Duration(n)*cost > room {
				return nil, c.tooMany(k, n, int(max(room-used, 0)/cost), used > 0)
			}
			used += time.Duration(n) * cost
			got[k] = n
		}
	}
	full := map[FaultKind]bool{}
	for {
		var next FaultKind
		least := 2.0
		for _, k := range FaultKinds() {
			if full[k] || got[k] >= want[k] || slices.Contains(c.ExactCounts, k) {
				continue
			}
			share := float64(got[k]) / float64(want[k])
			if share < least || share == least && c.faultCost(k) < c.faultCost(next) {
				next, least = k, share
			}
		}
		if next == "" {
			return got, nil
		}
		if cost := c.faultCost(next); used+cost <= room {
			used += cost
			got[next]++
		} else {
			full[next] = true
		}
	}
}

// tooMany is the refusal of an explicit count: one line, naming what fits.
func (c Config) tooMany(k FaultKind, n, fit int, others bool) error {
	subject := fmt.Sprintf("%d %s faults do not", n, k)
	if n == 1 {
		subject = fmt.Sprintf("1 %s fault does not", k)
	}
	fits := fmt.Sprintf("at most %d fit", fit)
	switch fit {
	case 0:
		fits = "none fits"
	case 1:
		fits = "at most 1 fits"
	}
	if others {
		fits += " besides the other counts given"
	}
	return fmt.Errorf("%s fit in %gs of traffic: %s (each needs about %.0f s); lower --%s or raise --duration",
		subject, c.Duration.Seconds(), fits, c.faultCost(k).Seconds(), countFlags[k])
}

// checkTraffic refuses an explicit schedule in which a consumer fault,
// once the faults before it have taken their time, would not be done a
// margin before the loader stops. Faults of the other kinds may run past
// the traffic: they are carried out all the same.
func (c Config) checkTraffic(plan []plannedFault) error {
	limit := c.Duration - trafficMargin(c.Duration)
	var free time.Duration // when the fault before is done
	for _, f := range plan {
		start := max(f.At, free)
		free = start + c.faultCost(f.Kind)
		if needsTraffic(f.Kind) && free > limit {
			return fmt.Errorf("--faults %s@%gs does not fit in %gs of traffic: after the faults before it, it would be done at about %.0f s, and a consumer fault must be done by %.0f s, while the loader pushes (each %s needs about %.0f s); schedule it earlier or raise --duration",
				f.Kind, f.At.Seconds(), c.Duration.Seconds(), free.Seconds(), limit.Seconds(), f.Kind, c.faultCost(f.Kind).Seconds())
		}
	}
	return nil
}

// scaledCounts describes the counts the schedule lowered to fit the
// traffic ("1 of 2 pg-restart"), or is empty.
func (c Config) scaledCounts(plan []plannedFault) []string {
	if c.explicitSchedule() {
		return nil
	}
	got := map[FaultKind]int{}
	for _, f := range plan {
		got[f.Kind]++
	}
	var out []string
	for _, k := range FaultKinds() {
		if want := c.counts()[k]; got[k] < want {
			out = append(out, fmt.Sprintf("%d of %d %s", got[k], want, k))
		}
	}
	return out
}
