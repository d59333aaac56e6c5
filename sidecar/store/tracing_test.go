package store

import (
	"context"
	"fmt"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/queenside/queenside/sidecar/telemetry"
)

// Fused pushes make one database span: the first request's child, linked
// both ways with the others; a request retried alone after the fused
// transaction failed gets a span of its own.
func TestFusedPushSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	telemetry.Use(tp)
	t.Cleanup(func() { telemetry.Use(nil) })
	s := openStore(t)
	tr := tp.Tracer("test")

	run := func(jobs []*pushJob) {
		s.pushes.RunBatch(jobs)
		for _, j := range jobs {
			<-j.done
			trace.SpanFromContext(j.ctx).End()
		}
	}
	traced := func(msgs []Message, name string) *pushJob {
		j := newJob(msgs)
		j.ctx, _ = tr.Start(context.Background(), name)
		return j
	}
	jobs := []*pushJob{traced(messages("p", "a", 2), "r0"), traced(messages("p", "b", 1), "r1"), traced(messages("x", "c", 3), "r2")}
	run(jobs)
	var dbs []sdktrace.ReadOnlySpan
	reqs := map[string]sdktrace.ReadOnlySpan{}
	for _, sp := range rec.Ended() {
		if sp.Name() == "db push" {
			dbs = append(dbs, sp)
		} else {
			reqs[sp.Name()] = sp
		}
	}
	if len(dbs) != 1 {
		t.Fatalf("%d db spans for one fused transaction", len(dbs))
	}
	db := dbs[0]
	if db.Parent().SpanID() != reqs["r0"].SpanContext().SpanID() || len(db.Links()) != 2 {
		t.Fatalf("db span parent %v links %v", db.Parent(), db.Links())
	}
	for _, n := range []string{"r1", "r2"} {
		if l := reqs[n].Links(); len(l) != 1 || l[0].SpanContext.SpanID() != db.SpanContext().SpanID() {
			t.Errorf("%s links %v, want the db span", n, l)
		}
	}
	attrs := map[string]string{}
	for _, kv := range db.Attributes() {
		attrs[string(kv.Key)] = kv.Value.Emit()
	}
	if attrs["messaging.batch.message_count"] != "6" || attrs["queenside.fused.requests"] != "3" {
		t.Errorf("attributes %v", attrs)
	}

	// A bad request fails the fused transaction: each is then run alone.
	bad := messages("p", "bad", 1)
	bad[0].TransactionID = "not \xff utf-8"
	rec.Reset()
	run([]*pushJob{traced(messages("p", "d", 1), "ok"), traced(bad, "bad")})
	var alone []string
	for _, sp := range rec.Ended() {
		if sp.Name() == "db push" && !sp.Parent().IsValid() {
			t.Errorf("a db span without a parent")
		}
		if sp.Name() == "db push" && len(sp.Links()) == 0 {
			alone = append(alone, fmt.Sprint(sp.Status().Code))
		}
	}
	if fmt.Sprint(alone) != "[Unset Error]" {
		t.Errorf("the requests run alone have db spans with status %v, want [Unset Error]", alone)
	}
}
