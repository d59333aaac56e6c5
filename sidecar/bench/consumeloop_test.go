package bench

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/queenside/queenside/sidecar/pgtest"
)

// TestConsumeLoopScenarios runs consume and ackasync, which run only when
// named, at a tiny size: both drain the whole backlog with no error.
func TestConsumeLoopScenarios(t *testing.T) {
	bin := buildSidecar(t)
	cfg := DefaultConfig()
	cfg.DatabaseURL = pgtest.NewDatabase(t)
	cfg.SidecarBinary = bin
	cfg.Out = ""
	cfg.Scenarios = []string{ScenarioConsume, ScenarioAckAsync}
	cfg.WritesQuiet = 0 // what PostgreSQL wrote is not what this test looks at
	cfg.Messages = 2000
	cfg.Connections = 2
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
	for i, r := range rep.Scenarios {
		if r.Name != cfg.Scenarios[i] {
			t.Errorf("scenario %d is %s, want %s", i, r.Name, cfg.Scenarios[i])
		}
		if r.Failed || r.Errors != 0 {
			t.Errorf("%s: failed %v with %d errors: %v", r.Name, r.Failed, r.Errors, r.ErrorSamples)
		}
		if r.Messages != 2000 || r.Redelivered != 0 {
			t.Errorf("%s: %d messages delivered, %d redelivered; want 2000 and 0", r.Name, r.Messages, r.Redelivered)
		}
		if r.MsgsPerSec <= 0 || r.Latency == nil {
			t.Errorf("%s: %v msg/s, latency %v", r.Name, r.MsgsPerSec, r.Latency)
		}
	}
}
