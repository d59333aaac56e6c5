package verify

import (
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
	want := map[FaultKind]int{FaultSidecarKill: 3, FaultSidecarTerm: 1, FaultPGRestart: 2, FaultConsumerKill: 2, FaultLeaseExpiry: 2}
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
