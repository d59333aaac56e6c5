package bench

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// TestPgmqNeedsItsSQL: without --pgmq-sql the scenario fails at setup and
// says which flag it needs, before it touches any database.
func TestPgmqNeedsItsSQL(t *testing.T) {
	b := &bench{cfg: DefaultConfig(), dbURL: "postgres://unused"}
	r := b.scenarioPgmq(context.Background())
	if r.Errors != 1 || len(r.ErrorSamples) != 1 || !strings.Contains(r.ErrorSamples[0], "--pgmq-sql") {
		t.Errorf("%d errors %v; want one naming --pgmq-sql", r.Errors, r.ErrorSamples)
	}
}

// TestPgmqScenario runs pgmq at a tiny size when QUEENSIDE_PGMQ_SQL names
// pgmq's pgmq-extension/sql/pgmq.sql: every message pushed is delivered,
// from every group, once, and nothing fails.
func TestPgmqScenario(t *testing.T) {
	sql := os.Getenv("QUEENSIDE_PGMQ_SQL")
	if sql == "" {
		t.Skip("QUEENSIDE_PGMQ_SQL does not name pgmq's pgmq-extension/sql/pgmq.sql, which the repository does not hold")
	}
	bin := buildSidecar(t)
	cfg := tinyConfig(t, bin, ScenarioPgmq)
	cfg.PgmqSQL = sql
	cfg.MixedPartitions = 100
	cfg.CurveRates = []int{500, 2000}
	cfg.CurveDuration = time.Second
	rep := runLogged(t, cfg, 2*time.Minute)
	if len(rep.Scenarios) != 1 || rep.Scenarios[0].Name != ScenarioPgmq {
		t.Fatalf("scenarios reported: %+v, want pgmq alone", rep.Scenarios)
	}
	r := rep.Scenarios[0]
	if r.Failed || r.Errors != 0 {
		t.Errorf("failed %v with %d errors: %v", r.Failed, r.Errors, r.ErrorSamples)
	}
	if r.Pushed == 0 || r.Messages != r.Pushed || r.Redelivered != 0 {
		t.Errorf("%d pushed, %d delivered, %d redelivered: want all pushed delivered once", r.Pushed, r.Messages, r.Redelivered)
	}
	if len(r.Curve) != len(cfg.CurveRates) {
		t.Fatalf("%d points, want %d", len(r.Curve), len(cfg.CurveRates))
	}
	for i, p := range r.Curve {
		if p.OfferedPerSec != cfg.CurveRates[i] || p.Pushed == 0 || !p.Drained || p.Errors != 0 {
			t.Errorf("point %d: offered %d, pushed %d, drained %v, %d errors",
				i, p.OfferedPerSec, p.Pushed, p.Drained, p.Errors)
		}
		if p.Delivery == nil || int64(p.Delivery.Count) != p.Pushed {
			t.Errorf("at %d/s: %d pushed, delivery times %+v: want one a message", p.OfferedPerSec, p.Pushed, p.Delivery)
		}
		if p.PartitionsPushed != cfg.MixedPartitions || p.PartitionsServed != p.PartitionsPushed {
			t.Errorf("at %d/s: %d groups served of %d pushed, want all %d",
				p.OfferedPerSec, p.PartitionsServed, p.PartitionsPushed, cfg.MixedPartitions)
		}
		if p.PostgresMicrosPer == nil {
			t.Errorf("at %d/s: PostgreSQL's µs a message unknown", p.OfferedPerSec)
		}
	}
}
