package verify

import (
	"maps"
	"strings"
	"testing"
	"time"
)

func TestSpreadFaults(t *testing.T) {
	cfg := DefaultConfig()
	plan, err := cfg.schedule()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[FaultKind]int{}
	var prev time.Duration
	for _, f := range plan {
		counts[f.Kind]++
		if f.At <= prev || f.At >= cfg.Duration {
			t.Errorf("fault %s at %v: not after %v and within %v", f.Kind, f.At, prev, cfg.Duration)
		}
		prev = f.At
	}
	want := map[FaultKind]int{FaultSidecarKill: 3, FaultSidecarTerm: 1, FaultPGRestart: 2, FaultPostgresStall: 2, FaultPGFailover: 2,
		FaultPartition: 2, FaultConsumerKill: 2, FaultLeaseExpiry: 2}
	for k, n := range want {
		if counts[k] != n {
			t.Errorf("%d %s, want %d", counts[k], k, n)
		}
	}
	// The two PostgreSQL restarts are apart: one in each half of the run.
	var pg []time.Duration
	for _, f := range plan {
		if f.Kind == FaultPGRestart {
			pg = append(pg, f.At)
		}
	}
	if len(pg) == 2 && (pg[0] > cfg.Duration/2 || pg[1] < cfg.Duration/2) {
		t.Errorf("PostgreSQL restarts at %v", pg)
	}
}

func TestParseSchedule(t *testing.T) {
	plan, err := parseSchedule("pg-restart@2m, sidecar-kill@30s", 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan) != 2 || plan[0].Kind != FaultSidecarKill || plan[0].At != 30*time.Second || plan[1].At != 2*time.Minute {
		t.Errorf("plan %+v", plan)
	}
	for _, bad := range []string{"sidecar-kill", "nap@10s", "pg-restart@11m", "pg-restart@x"} {
		if _, err := parseSchedule(bad, 10*time.Minute); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// doneTimes plays plan as the injector runs it, one fault after another,
// each taking its estimated time, and returns when each is done.
func doneTimes(c Config, plan []plannedFault) []time.Duration {
	var free time.Duration
	out := make([]time.Duration, len(plan))
	for i, f := range plan {
		free = max(f.At, free) + c.faultCost(f.Kind)
		out[i] = free
	}
	return out
}

// The default counts, on any duration, are scaled to what fits: played one
// after another, every fault is done a margin before the loader stops, and
// the consumer faults come before the rest.
func TestScheduleFitsTheTraffic(t *testing.T) {
	for _, d := range []time.Duration{30 * time.Second, time.Minute, 150 * time.Second, 5 * time.Minute, 10 * time.Minute} {
		cfg := DefaultConfig()
		cfg.Duration, cfg.Rate, cfg.Partitions = d, 3000, 500
		plan, err := cfg.schedule()
		if err != nil {
			t.Fatalf("%v: %v", d, err)
		}
		limit := d - trafficMargin(d)
		done := doneTimes(cfg, plan)
		seenOther := false
		for i, f := range plan {
			if done[i] > limit {
				t.Errorf("%v: %s@%v done at %v, after %v (the loader stops at %v)", d, f.Kind, f.At, done[i], limit, d)
			}
			if needsTraffic(f.Kind) && seenOther {
				t.Errorf("%v: %s@%v comes after a fault that needs no traffic", d, f.Kind, f.At)
			}
			seenOther = seenOther || !needsTraffic(f.Kind)
		}
		got := map[FaultKind]int{}
		for _, f := range plan {
			got[f.Kind]++
		}
		for k, n := range cfg.counts() {
			if got[k] > n {
				t.Errorf("%v: %d %s, more than the count %d", d, got[k], k, n)
			}
		}
	}
}

// 320 s at 3,000 events/s over 500 partitions keeps one fault of every
// kind counted (the worker faults need Citus) and all three sidecar kills,
// and the default ten minutes keep every count.
func TestScheduleCounts(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Duration, cfg.Rate, cfg.Partitions = 320*time.Second, 3000, 500
	plan, err := cfg.schedule()
	if err != nil {
		t.Fatal(err)
	}
	got := map[FaultKind]int{}
	for _, f := range plan {
		got[f.Kind]++
	}
	for _, k := range FaultKinds() {
		if got[k] == 0 && cfg.counts()[k] > 0 {
			t.Errorf("320 s: no %s in %v", k, plan)
		}
	}
	if got[FaultSidecarKill] != cfg.SidecarKills {
		t.Errorf("320 s: %d sidecar-kill, want all %d", got[FaultSidecarKill], cfg.SidecarKills)
	}
	if len(cfg.scaledCounts(plan)) == 0 {
		t.Errorf("320 s: the header would not say the counts were lowered")
	}

	cfg = DefaultConfig()
	plan, err = cfg.schedule()
	if err != nil {
		t.Fatal(err)
	}
	got = map[FaultKind]int{}
	for _, f := range plan {
		got[f.Kind]++
	}
	want := cfg.counts()
	maps.DeleteFunc(want, func(_ FaultKind, n int) bool { return n == 0 })
	if !maps.Equal(got, want) {
		t.Errorf("10 minutes: %v, want the default counts %v", got, want)
	}
}

// A count given that cannot fit is refused in one line naming what fits;
// one that fits is kept whole, the other kinds making room.
func TestScheduleRefusesExplicitCounts(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Duration, cfg.Rate, cfg.Partitions = 150*time.Second, 3000, 500
	cfg.PGFailovers, cfg.ExactCounts = 6, []FaultKind{FaultPGFailover}
	err := cfg.Validate()
	want := "6 pg-failover faults do not fit in 150s of traffic: at most 3 fit (each needs about 40 s); lower --pg-failovers or raise --duration"
	if err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}

	cfg.PGFailovers = 3
	plan, err := cfg.schedule()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for i, at := range doneTimes(cfg, plan) {
		if plan[i].Kind == FaultPGFailover {
			n++
		}
		if at > cfg.Duration-trafficMargin(cfg.Duration) {
			t.Errorf("%s@%v done at %v", plan[i].Kind, plan[i].At, at)
		}
	}
	if n != 3 {
		t.Errorf("%d failovers, want the 3 given: %v", n, plan)
	}
}

// An explicit schedule is refused when a consumer fault in it would be done
// too late for the traffic, once the faults before it have taken their time.
func TestScheduleRefusesLateConsumerFaults(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Duration = 150 * time.Second
	cfg.Faults = "pg-restart@100s,lease-expiry@110s"
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "--faults lease-expiry@110s does not fit in 150s of traffic") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("got %v", err)
	}
	// The PostgreSQL restart alone may run past the traffic: it needs none.
	cfg.Faults = "lease-expiry@110s,pg-restart@130s"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	// TestVerifyWithFaults' schedule fits its 36 s.
	cfg.Duration, cfg.LeaseSeconds, cfg.PGDown, cfg.SidecarDown = 36*time.Second, 4, 3*time.Second, time.Second
	cfg.Faults = "sidecar-kill@3s,consumer-kill@5s,lease-expiry@8s,pg-restart@13s,sidecar-term@19s,postgres-stall@21s,partition@26s,pg-failover@31s"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
}
