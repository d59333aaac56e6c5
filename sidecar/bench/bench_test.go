package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/queenside/queenside/sidecar/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// buildSidecar builds the real binary the bench runs as its sidecar.
func buildSidecar(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "queenside")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/queenside").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// tinyConfig is a run of the given scenarios against a sidecar built from
// this tree and a database of its own, writing no report.
func tinyConfig(t *testing.T, bin string, scenarios ...string) Config {
	t.Helper()
	cfg := DefaultConfig()
	cfg.DatabaseURL = pgtest.NewDatabase(t)
	cfg.SidecarBinary = bin
	cfg.Out = ""
	cfg.Scenarios = scenarios
	cfg.WritesQuiet = 0 // what PostgreSQL wrote is not what these tests look at
	return cfg
}

// runLogged runs cfg within limit, logs what it printed, and fails the test
// when the run fails.
func runLogged(t *testing.T, cfg Config, limit time.Duration) *Report {
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
	return rep
}

// TestEveryScenario runs the whole instrument at tiny sizes against a real
// sidecar child and PostgreSQL, so it cannot rot. It checks correctness
// only; speed depends on the machine and is never asserted.
func TestEveryScenario(t *testing.T) {
	bin := buildSidecar(t)
	cfg := DefaultConfig()
	cfg.DatabaseURL = pgtest.NewDatabase(t)
	cfg.SidecarBinary = bin
	cfg.Out = filepath.Join(t.TempDir(), "bench.json")
	cfg.Messages = 2000
	cfg.MixedDuration = 2 * time.Second
	cfg.MixedPartitions = 100
	cfg.CurveRates = []int{500, 2000}
	cfg.CurveDuration = time.Second
	cfg.IdleDuration = 2 * time.Second
	cfg.LatencyRequests = 100
	cfg.ScalePartitions = 200
	cfg.FanoutGroups = 2
	cfg.FanoutMessages = 1000
	cfg.FloorDuration = time.Second
	cfg.FloorPartitions = 100
	cfg.WritesQuiet = time.Second // row counts may come short (writes.go); WAL and commits are there
	var out bytes.Buffer
	cfg.Output = &out

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	t.Logf("output:\n%s", out.String())
	if err != nil {
		t.Fatalf("Run: %v", err)
	}

	// Given a database, the scenarios that stop PostgreSQL are skipped;
	// TestOutageScenarios runs them.
	want := slices.DeleteFunc(Scenarios(), stopsPostgres)
	if len(rep.Scenarios) != len(want) {
		t.Fatalf("%d scenarios reported, want %d", len(rep.Scenarios), len(want))
	}
	if !bytes.Contains(out.Bytes(), []byte("spool: skipped")) {
		t.Error("the skipped outage scenarios are not reported as skipped")
	}
	for i, r := range rep.Scenarios {
		if r.Name != want[i] {
			t.Errorf("scenario %d is %s, want %s", i, r.Name, want[i])
		}
		if r.Failed || r.Errors != 0 {
			t.Errorf("%s: failed %v with %d errors: %v", r.Name, r.Failed, r.Errors, r.ErrorSamples)
		}
		switch r.Name {
		case ScenarioPush, ScenarioPartitions, ScenarioMixed:
			if w := r.Writes; w == nil || w.Messages == 0 || w.WALBytes == 0 || w.Commits == 0 {
				t.Errorf("%s: what PostgreSQL wrote: %+v", r.Name, w)
			}
		case ScenarioCurve:
			for _, p := range r.Curve {
				if p.Writes == nil || p.Writes.Messages == 0 || p.Writes.WALBytes == 0 {
					t.Errorf("curve at %d msg/s: what PostgreSQL wrote: %+v", p.OfferedPerSec, p.Writes)
				}
			}
		}
		if (r.MsgsPerSec <= 0 && r.Name != ScenarioIdle) || r.Latency == nil {
			t.Errorf("%s: %v msg/s, latency %v", r.Name, r.MsgsPerSec, r.Latency)
		}
		// The sidecar is a child here, so its CPU and memory are known.
		if r.SidecarCPUSeconds == nil || r.SidecarPeakRSSBytes == nil {
			t.Errorf("%s: sidecar cpu %v, rss %v: unknown for a child process", r.Name, r.SidecarCPUSeconds, r.SidecarPeakRSSBytes)
		}
	}
	byName := map[string]Result{}
	for _, r := range rep.Scenarios {
		byName[r.Name] = r
	}
	// Each scenario moved what it was asked to.
	for name, want := range map[string]int64{
		ScenarioPush: 2000, ScenarioPopAck: 2000, ScenarioAutoAck: 2000,
		ScenarioLatency: 100, ScenarioPartitions: 2000, ScenarioFanout: 2 * 1000,
	} {
		if got := byName[name].Messages; got != want {
			t.Errorf("%s moved %d messages, want %d", name, got, want)
		}
	}
	checkCurve(t, byName[ScenarioCurve], cfg)
	checkIdle(t, byName[ScenarioIdle], cfg)
	for _, name := range []string{ScenarioPopAck, ScenarioAutoAck, ScenarioMixed, ScenarioCurve, ScenarioFanout} {
		if d := byName[name].Delivery; d == nil || d.Count == 0 {
			t.Errorf("%s: no push-to-delivery latency", name)
		}
	}
	if f := byName[ScenarioFloor].Messages; f == 0 || f%int64(cfg.FloorTransactionMessages) != 0 {
		t.Errorf("floor moved %d messages, want whole transactions of %d", f, cfg.FloorTransactionMessages)
	}
	if n := floorSchemasLeft(t, cfg.DatabaseURL); n != 0 {
		t.Errorf("%d floor schemas left in the database, want them dropped", n)
	}
	if p := rep.Conditions.Postgres; p == nil || p.Version == "" || p.Fsync == "" || p.SynchronousCommit == "" {
		t.Errorf("PostgreSQL conditions not recorded: %+v", p)
	}

	raw, err := os.ReadFile(cfg.Out)
	if err != nil {
		t.Fatal(err)
	}
	var parsed struct {
		Conditions map[string]any   `json:"conditions"`
		Flags      map[string]any   `json:"flags"`
		Scenarios  []map[string]any `json:"scenarios"`
		Failed     bool             `json:"failed"`
	}
	if err := json.Unmarshal(raw, &parsed); err != nil {
		t.Fatalf("the JSON report does not parse: %v\n%s", err, raw)
	}
	if len(parsed.Scenarios) != len(want) || parsed.Failed || parsed.Flags["mixed-duration"] != "2s" {
		t.Errorf("JSON report: %d scenarios, failed %v, flags %v", len(parsed.Scenarios), parsed.Failed, parsed.Flags)
	}
}

// checkCurve checks that every rate of the curve was measured, delivered
// in full, to every partition pushed to, with its cost known.
func checkCurve(t *testing.T, r Result, cfg Config) {
	t.Helper()
	if len(r.Curve) != len(cfg.CurveRates) {
		t.Fatalf("curve: %d points, want %d", len(r.Curve), len(cfg.CurveRates))
	}
	for i, p := range r.Curve {
		if p.OfferedPerSec != cfg.CurveRates[i] || p.Pushed == 0 || p.Delivered == 0 || !p.Drained || p.Errors != 0 {
			t.Errorf("curve point %d: offered %d, pushed %d, delivered %d, drained %v, %d errors",
				i, p.OfferedPerSec, p.Pushed, p.Delivered, p.Drained, p.Errors)
		}
		if p.PartitionsPushed != cfg.MixedPartitions || p.PartitionsServed != p.PartitionsPushed {
			t.Errorf("curve at %d/s: %d partitions served of %d pushed, want all %d",
				p.OfferedPerSec, p.PartitionsServed, p.PartitionsPushed, cfg.MixedPartitions)
		}
		if p.Delivery == nil || p.PostgresMicrosPer == nil || p.SidecarMicrosPer == nil {
			t.Errorf("curve at %d/s: delivery %v, PostgreSQL %v µs, sidecar %v µs a message: want them known",
				p.OfferedPerSec, p.Delivery, p.PostgresMicrosPer, p.SidecarMicrosPer)
		}
	}
}

// checkIdle checks that idle watched its consumers wait, and got nothing.
func checkIdle(t *testing.T, r Result, cfg Config) {
	t.Helper()
	f := r.Idle
	if f == nil {
		t.Fatal("idle: no figures")
	}
	if r.Messages != 0 || f.Pops == 0 || f.Consumers != cfg.MixedConsumers || f.Partitions != cfg.MixedPartitions {
		t.Errorf("idle: %d messages, %d pops, %d consumers, %d partitions", r.Messages, f.Pops, f.Consumers, f.Partitions)
	}
	if f.PostgresCorePercent == nil || f.SidecarCorePercent == nil {
		t.Errorf("idle: PostgreSQL %v, sidecar %v: want their CPU known", f.PostgresCorePercent, f.SidecarCorePercent)
	}
}

// TestOutageScenarios runs spool and replay, which stop and restart the
// PostgreSQL the bench starts itself.
func TestOutageScenarios(t *testing.T) {
	bin := buildSidecar(t)
	cfg := DefaultConfig()
	cfg.SidecarBinary = bin
	cfg.Out = ""
	cfg.Scenarios = []string{ScenarioSpool, ScenarioReplay}
	cfg.Messages = 2000
	var out bytes.Buffer
	cfg.Output = &out
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	t.Logf("output:\n%s", out.String())
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(rep.Scenarios) != 2 {
		t.Fatalf("%d scenarios reported, want 2", len(rep.Scenarios))
	}
	for _, r := range rep.Scenarios {
		if r.Failed || r.Messages != 2000 || r.MsgsPerSec <= 0 {
			t.Errorf("%s: failed %v, %d messages, %v msg/s: %v", r.Name, r.Failed, r.Messages, r.MsgsPerSec, r.ErrorSamples)
		}
	}
}

// TestNoSidecar checks that a sidecar that is not there fails the run
// instead of producing numbers.
func TestNoSidecar(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Socket = filepath.Join(t.TempDir(), "none.sock")
	cfg.Out = ""
	cfg.Output = &bytes.Buffer{}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := Run(ctx, cfg); err == nil {
		t.Fatal("Run against a missing sidecar succeeded")
	}
}
