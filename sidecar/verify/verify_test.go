package verify

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/queenside/queenside/schema"
	"github.com/queenside/queenside/sidecar/citustest"
	"github.com/queenside/queenside/sidecar/netns"
	"github.com/queenside/queenside/sidecar/store"
)

// buildSidecar builds the real binary the run starts as its sidecars.
func buildSidecar(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "queenside")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/queenside").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// TestVerifyWithFaults is `make verify` in 48 seconds: three sidecars and
// four stages on a PostgreSQL of its own, with one fault of each kind, and
// it must end with every event through every stage exactly once and in
// order, but the one the damaged spool record cost, reported by name.
func TestVerifyWithFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("a 48-second run with real processes")
	}
	cfg := DefaultConfig()
	cfg.SidecarBinary = buildSidecar(t)
	cfg.Partitions = 20
	cfg.Rate = 100
	cfg.Duration = 48 * time.Second
	cfg.LeaseSeconds = 4
	// Faults run one after the other. The consumer's come first: they need
	// traffic to act on, and a failover (which waits for the old primary to
	// be rewound) can outlast the traffic on a loaded machine. The stall
	// and the partition outlast the sidecars' database timeout, so pushes
	// are spooled, and come while the loader still pushes, as do the spool
	// faults, which need records spooled during their outage.
	cfg.Faults = "sidecar-kill@3s,consumer-kill@5s,lease-expiry@8s,pg-restart@13s,sidecar-term@19s,postgres-stall@21s,partition@26s," +
		"spool-disk-full@31s,spool-damage@37s,pg-failover@43s"
	cfg.PGDown = 3 * time.Second
	cfg.DatabaseTimeout = 2 * time.Second
	cfg.SidecarDown = time.Second
	cfg.DrainTimeout = time.Minute
	cfg.Interval = 5 * time.Second
	cfg.Seed = 1
	cfg.Out = filepath.Join(t.TempDir(), "verify.json")
	rep := runPassing(t, cfg, 3*time.Minute)
	// The loader pushes past --duration only while a consumer fault waits.
	events := rep.Loader.Events
	if events < cfg.Events() || (events > cfg.Events()) != (rep.Loader.Extended != "") {
		t.Errorf("loader: %d events of %d planned, extended %q", events, cfg.Events(), rep.Loader.Extended)
	}
	// The damaged record cost one event, in its queue and every later one.
	if rep.ReportedLost != 1 {
		t.Errorf("%d events reported lost to the damaged spool record, want 1", rep.ReportedLost)
	}
	for _, q := range rep.Queues {
		if q.Verified+q.ReportedLost != events || q.Events != events {
			t.Errorf("queue %d (%s): %d of %d events verified, %d reported lost", q.Queue, q.Consumer, q.Verified, events, q.ReportedLost)
		}
	}
	// One of each kind but the Citus ones, and the outage's own kills: one
	// while PostgreSQL is down, one as it comes back. Where no network
	// namespace can be made, the partition is skipped, and says why.
	partitions := netns.Available() == nil
	volumes := true
	for _, f := range rep.Faults {
		if f.Kind == FaultSpoolDiskFull && f.Skipped != "" {
			volumes = false // no tmpfs can be mounted here
		}
	}
	for _, k := range FaultKinds() {
		want := 1
		switch k {
		case FaultSidecarKill:
			want = 1 + cfg.OutageKills
		case FaultWorkerRestart, FaultWorkerStall:
			want = 0 // TestVerifyOnCitus
		case FaultPartition:
			if !partitions {
				want = 0
			}
		case FaultSpoolDiskFull:
			if !volumes {
				want = 0
			}
		}
		if rep.FaultCounts[k] != want {
			t.Errorf("%d %s injected, want %d", rep.FaultCounts[k], k, want)
		}
	}
	for _, f := range rep.Faults {
		checkFaultFigures(t, cfg, f)
	}
	// The outage must have sent pushes to the spools, and they came back:
	// replay ran and every spool ended empty (the events themselves are
	// checked above). The replayed counter cannot be held to the buffered
	// answers: it lives in the process, and a SIGKILL mid-replay loses
	// whatever was replayed after the last sample before the kill.
	if rep.Spool.LoaderBuffered == 0 || rep.Spool.Replayed == 0 || rep.Spool.RecordsLeft != 0 {
		t.Errorf("spool: %d buffered answers, %d replayed, %d records left",
			rep.Spool.LoaderBuffered, rep.Spool.Replayed, rep.Spool.RecordsLeft)
	}
	// The consumer faults abandoned messages, which came again.
	if rep.Redeliveries == 0 {
		t.Error("no redelivery observed")
	}
	if rep.Latency == nil || rep.Latency.Count != events-rep.ReportedLost {
		t.Errorf("latency %+v", rep.Latency)
	}

	raw, err := os.ReadFile(cfg.Out)
	if err != nil {
		t.Fatal(err)
	}
	var parsed struct {
		Passed bool             `json:"passed"`
		Flags  map[string]any   `json:"flags"`
		Queues []map[string]any `json:"queues"`
		Faults []map[string]any `json:"faults"`
	}
	if err := json.Unmarshal(raw, &parsed); err != nil {
		t.Fatalf("the JSON report does not parse: %v", err)
	}
	if !parsed.Passed || len(parsed.Queues) != cfg.Stages+1 || parsed.Flags["faults"] != cfg.Faults {
		t.Errorf("JSON report: passed %v, %d queues, flags %v", parsed.Passed, len(parsed.Queues), parsed.Flags)
	}
	for _, f := range parsed.Faults {
		if f["kind"] != string(FaultPostgresStall) {
			continue
		}
		for _, field := range []string{"maxPushWaitSeconds", "buffered", "spoolsDrainedSeconds", "locksFreeSeconds", "lockProbe"} {
			if _, ok := f[field]; !ok {
				t.Errorf("the JSON report's postgres-stall has no %s: %v", field, f)
			}
		}
	}
}

// checkFaultFigures holds a fault's figures to what it did: every fault on
// a process or the network says what the pushes went through, and a stall
// or a partition long enough for the sidecars' database timeout spooled
// pushes, answered within that timeout, drained the spools and freed the
// locks; a partition skipped says why and has no figures.
func checkFaultFigures(t *testing.T, cfg Config, f FaultRecord) {
	t.Helper()
	if f.Error != "" {
		t.Errorf("%s on %s: %s", f.Kind, f.Target, f.Error)
	}
	if f.Skipped != "" {
		skippable := f.Kind == FaultPartition && netns.Available() != nil || f.Kind == FaultSpoolDiskFull
		if !skippable || f.MaxPushWait != nil {
			t.Errorf("%s skipped (%s) with figures %v", f.Kind, f.Skipped, f.MaxPushWait)
		}
		return
	}
	if needsTraffic(f.Kind) {
		return
	}
	if f.MaxPushWait == nil || f.Buffered == nil {
		t.Errorf("%s: no push figures: %+v", f.Kind, f)
		return
	}
	if f.Kind != FaultPostgresStall && f.Kind != FaultWorkerStall && f.Kind != FaultPartition {
		return
	}
	// The margin: a spool write, the answer, a loaded machine.
	bound := cfg.DatabaseTimeout + 3*time.Second
	if *f.Buffered == 0 || *f.MaxPushWait < cfg.DatabaseTimeout.Seconds()/2 || *f.MaxPushWait > bound.Seconds() {
		t.Errorf("%s: %d items buffered, the longest push waited %.1f s; want some buffered, after a wait of up to %v",
			f.Kind, *f.Buffered, *f.MaxPushWait, bound)
	}
	if f.SpoolsDrained == nil || f.LocksFree == nil || f.LockProbe == "" {
		t.Errorf("%s: spools drained %v, locks free %v (%q)", f.Kind, f.SpoolsDrained, f.LocksFree, f.LockProbe)
		return
	}
	// A cut-off sidecar's sessions end within the dead-peer bound its
	// database timeout gives PostgreSQL's end; a thawed server ends the
	// sessions whose clients hung up within the guards' T/5 (a statement
	// notices its client gone by client_connection_check_interval, a
	// transaction idle between statements is ended by
	// idle_in_transaction_session_timeout; on Citus the coordinator's
	// session then aborts its part on the worker).
	locksBound := store.IdleTransactionTimeout(cfg.DatabaseTimeout) + 2*time.Second
	switch f.Kind {
	case FaultPartition:
		locksBound = store.DeadPeerBound(cfg.DatabaseTimeout) + 2*time.Second
	case FaultWorkerStall:
		// A transaction over two workers whose coordinator session was
		// cut short between its PREPARE on the frozen worker and its
		// COMMIT PREPARED is prepared there once thawed, and holds its
		// rows until the coordinator resolves it: here the rows were free
		// 0.8 to 3.9 s after the thaw, and a slow run that was traced
		// waited on such a transaction.
		locksBound = max(locksBound, citustest.Recover2PCInterval+2*time.Second)
	}
	if *f.LocksFree > locksBound.Seconds() {
		t.Errorf("%s: locks free %.1f s after %s, want within %v", f.Kind, *f.LocksFree, lockProbeFrom(f.Kind), locksBound)
	}
}

// The settings a run is given reach its PostgreSQL and are read back into
// the report, where the comparison of two runs needs them.
func TestVerifyPassesPostgresSettings(t *testing.T) {
	if testing.Short() {
		t.Skip("a run with real processes")
	}
	cfg := DefaultConfig()
	cfg.SidecarBinary = buildSidecar(t)
	cfg.Sidecars = 1
	cfg.Stages = 1
	cfg.Partitions = 4
	cfg.Rate = 50
	cfg.Duration = 2 * time.Second
	cfg.SidecarKills, cfg.SidecarTerms, cfg.PGRestarts, cfg.PGFailovers, cfg.WorkerRestarts, cfg.ConsumerKills, cfg.LeaseExpiries, cfg.OutageKills = 0, 0, 0, 0, 0, 0, 0, 0
	cfg.Interval = time.Second
	cfg.Out = ""
	cfg.PGSettings = []string{"work_mem=7MB", "track_functions=pl"}
	var out bytes.Buffer
	cfg.Output = &out
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	if !rep.Passed {
		t.Fatalf("the run did not pass:\n%s", out.String())
	}
	if got := rep.Conditions.Postgres["work_mem"]; got != "7MB" {
		t.Errorf("work_mem on the run's server: %q, want 7MB", got)
	}
	if got := rep.Conditions.Postgres["track_functions"]; got != "pl" {
		t.Errorf("track_functions on the run's server: %q, want pl", got)
	}
	if !strings.Contains(out.String(), "PostgreSQL settings given: work_mem 7MB, track_functions pl") {
		t.Errorf("the report does not list the settings given:\n%s", out.String())
	}

	cfg.PGSettings = []string{"work_mem"}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), `--pg-setting "work_mem": want name=value`) {
		t.Errorf("a setting without a value: %v", err)
	}
}

// TestVerifyOnCitus is the same check on a Citus cluster: the sidecars on
// the coordinator, the schema over two workers' shards, a worker frozen,
// then one and then the coordinator stopped as a crash would stop them.
// Every outage must end with every event through every stage exactly once
// and in order.
func TestVerifyOnCitus(t *testing.T) {
	if testing.Short() {
		t.Skip("a 30-second run with real processes")
	}
	if why := citustest.Missing(); why != "" {
		t.Skip(why)
	}
	cfg := DefaultConfig()
	cfg.Citus = true
	cfg.SidecarBinary = buildSidecar(t)
	cfg.Partitions = 16
	cfg.Rate = 50
	cfg.Duration = 30 * time.Second
	cfg.LeaseSeconds = 4
	cfg.Faults = "worker-stall@5s,worker-restart@10s,pg-restart@18s"
	// The sidecars' default database timeout, and a stall longer than it,
	// so that pushes are spooled. With a timeout of 2 s, calls on this
	// cluster (three nodes, the sidecars and the verifier on two cores)
	// took longer than their bound after the thaw, and the replays got
	// through only once the loader had stopped.
	cfg.PGDown = 6 * time.Second
	cfg.DatabaseTimeout = store.DefaultTimeout
	cfg.SidecarDown = time.Second
	cfg.DrainTimeout = 2 * time.Minute
	cfg.Interval = 5 * time.Second
	cfg.Seed = 1
	cfg.Out = ""
	rep := runPassing(t, cfg, 5*time.Minute)
	for _, q := range rep.Queues {
		if q.Verified != rep.Loader.Events {
			t.Errorf("queue %d (%s): %d of %d events verified", q.Queue, q.Consumer, q.Verified, rep.Loader.Events)
		}
	}
	want := map[FaultKind]int{FaultWorkerStall: 1, FaultWorkerRestart: 1, FaultPGRestart: 1, FaultSidecarKill: cfg.OutageKills}
	for _, k := range FaultKinds() {
		if rep.FaultCounts[k] != want[k] {
			t.Errorf("%d %s carried out, want %d", rep.FaultCounts[k], k, want[k])
		}
	}
	for _, f := range rep.Faults {
		checkFaultFigures(t, cfg, f)
		if (f.Kind == FaultWorkerRestart || f.Kind == FaultWorkerStall) && !strings.HasPrefix(f.Target, "Citus worker ") {
			t.Errorf("%s target %q", f.Kind, f.Target)
		}
	}
	// Both outages sent pushes to the spools, and every spool was replayed.
	if rep.Spool.LoaderBuffered == 0 || rep.Spool.RecordsLeft != 0 {
		t.Errorf("spool: %d buffered answers, %d records left", rep.Spool.LoaderBuffered, rep.Spool.RecordsLeft)
	}
	if c := rep.Conditions.Citus; c == nil || c.Workers != cfg.CitusWorkers || c.Shards != schema.DefaultShardCount {
		t.Errorf("Citus conditions %+v, want %d workers and %d shards", c, cfg.CitusWorkers, schema.DefaultShardCount)
	}
}

// runPassing runs cfg within limit, logging its output, and fails t unless
// the run passed with no duplicate, gap or order violation.
func runPassing(t *testing.T, cfg Config, limit time.Duration) *Report {
	t.Helper()
	var out bytes.Buffer
	cfg.Output = &out
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	rep, err := Run(ctx, cfg)
	t.Logf("output:\n%s", out.String())
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !rep.Passed || rep.Duplicates != 0 || rep.Gaps != 0 || rep.OrderViolations != 0 {
		t.Fatalf("passed %v: %d duplicates, %d gaps, %d order violations", rep.Passed, rep.Duplicates, rep.Gaps, rep.OrderViolations)
	}
	return rep
}
