package bench

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/queenside/queenside/sidecar/pgtest"
)

// A run with tracing starts the sidecar exporting to the bench's receiver,
// which it does, and says so in the report.
func TestTracingRun(t *testing.T) {
	// startOTLPSink sets these for the child; t.Setenv puts them back.
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_TRACES_SAMPLER", "OTEL_SERVICE_NAME"} {
		t.Setenv(k, "")
	}
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "20")
	rep, out, _ := pushAndPopAck(t, func(c *Config) { c.Tracing = true })
	if rep.Tracing == nil || rep.Tracing.Exports == 0 || rep.Tracing.Bytes == 0 {
		t.Fatalf("tracing %+v: the sidecar exported nothing\n%s", rep.Tracing, out.String())
	}
	if !strings.Contains(out.String(), "tracing:  on") {
		t.Errorf("the header does not say tracing is on:\n%s", out.String())
	}
}

func TestTracingNeedsTheSidecarTheBenchStarts(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Socket, cfg.Tracing = "/tmp/x.sock", true
	if err := cfg.Validate(); err == nil {
		t.Fatal("--tracing with --socket accepted")
	}
}

func TestProducerContextIsFreshAndSampledWhenAsked(t *testing.T) {
	ctx := context.Background()
	if trace.SpanContextFromContext(producerContext(ctx)).IsValid() {
		t.Fatal("a trace context without tracing")
	}
	ctx = withProducerSpans(ctx)
	a := trace.SpanContextFromContext(producerContext(ctx))
	b := trace.SpanContextFromContext(producerContext(ctx))
	if !a.IsValid() || !a.IsSampled() || a.TraceID() == b.TraceID() {
		t.Fatalf("%v %v: want two valid, sampled, distinct trace contexts", a, b)
	}
}

// A run with --encrypt seals every payload: the scenarios still deliver
// every message, and the stored payloads are sealed records.
func TestEncryptRun(t *testing.T) {
	rep, out, dbURL := pushAndPopAck(t, func(c *Config) { c.Encrypt = true })
	for _, r := range rep.Scenarios {
		if r.Failed || r.Errors != 0 {
			t.Fatalf("%s failed with encryption on:\n%s", r.Name, out.String())
		}
	}
	if !strings.Contains(out.String(), "payloads: encrypted") {
		t.Errorf("the header does not say payloads are encrypted:\n%s", out.String())
	}
	pool := pgtest.Pool(t, dbURL)
	var sealed, plain int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE get_byte(p, 0) = 193), count(*) FILTER (WHERE get_byte(p, 0) <> 193)
		FROM queenside.segments s, unnest(s.payloads) p`).Scan(&sealed, &plain); err != nil {
		t.Fatal(err)
	}
	if sealed == 0 || plain != 0 {
		t.Fatalf("stored payloads: %d sealed, %d not", sealed, plain)
	}
	if err := (Config{Socket: "/tmp/x.sock", Encrypt: true}).withDefaults().Validate(); err == nil {
		t.Fatal("--encrypt with --socket accepted")
	}
}

// pushAndPopAck runs push and popack at a tiny size with a sidecar of the
// bench's own, as set changes the configuration, and returns the report,
// what it printed and the database.
func pushAndPopAck(t *testing.T, set func(*Config)) (*Report, *bytes.Buffer, string) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.DatabaseURL = pgtest.NewDatabase(t)
	cfg.SidecarBinary = buildSidecar(t)
	cfg.Out = filepath.Join(t.TempDir(), "bench.json")
	cfg.Scenarios = []string{ScenarioPush, ScenarioPopAck}
	cfg.Messages = 2000
	cfg.WritesQuiet = 0 // what PostgreSQL wrote is not what these tests look at
	set(&cfg)
	out := &bytes.Buffer{}
	cfg.Output = out
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	return rep, out, cfg.DatabaseURL
}
