package queenside

import (
	"context"
	"fmt"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/queenside/queenside/protocol"
)

// traced registers an in-memory tracer provider and the W3C propagator
// for the test, and puts no-ops back after it.
func traced(t *testing.T) (trace.Tracer, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	t.Cleanup(func() {
		otel.SetTracerProvider(noop.NewTracerProvider())
		otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator())
	})
	return tp.Tracer("test"), rec
}

func TestPushCarriesTheCallersTraceContext(t *testing.T) {
	tr, _ := traced(t)
	ctx, span := tr.Start(context.Background(), "produce")
	defer span.End()
	want := fmt.Sprintf("00-%s-%s-01", span.SpanContext().TraceID(), span.SpanContext().SpanID())
	own := map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	other := map[string]string{"k": "v"}
	full := map[string]string{}
	for i := range protocol.MaxHeaders {
		full[fmt.Sprint(i)] = "x"
	}
	items := []PushItem{{Queue: "q"}, {Queue: "q", Headers: own}, {Queue: "q", Headers: other}, {Queue: "q", Headers: full}}
	out := withTraceContext(ctx, items)
	if out[0].Headers["traceparent"] != want {
		t.Errorf("item without headers: %v, want traceparent %s", out[0].Headers, want)
	}
	if out[1].Headers["traceparent"] != own["traceparent"] || len(out[1].Headers) != 1 {
		t.Errorf("an item's own traceparent was replaced: %v", out[1].Headers)
	}
	if out[2].Headers["traceparent"] != want || out[2].Headers["k"] != "v" {
		t.Errorf("item with headers: %v", out[2].Headers)
	}
	if len(out[3].Headers) != protocol.MaxHeaders {
		t.Errorf("an item at the header limit got %d headers", len(out[3].Headers))
	}
	// The caller's items and maps are left as they were.
	if items[0].Headers != nil || len(other) != 1 || len(own) != 1 || len(full) != protocol.MaxHeaders {
		t.Errorf("the caller's items changed: %+v", items)
	}
}

func TestPushAddsNothingWithoutASpanOrAPropagator(t *testing.T) {
	items := []PushItem{{Queue: "q"}}
	// Nothing registered: a span context alone is not enough.
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled})
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator())
	if out := withTraceContext(trace.ContextWithSpanContext(context.Background(), sc), items); out[0].Headers != nil {
		t.Errorf("headers %v with no propagator registered", out[0].Headers)
	}
	traced(t)
	if out := withTraceContext(context.Background(), items); out[0].Headers != nil {
		t.Errorf("headers %v without a span", out[0].Headers)
	}
	allocs := testing.AllocsPerRun(100, func() { withTraceContext(context.Background(), items) })
	if allocs != 0 {
		t.Errorf("%v allocations without a span", allocs)
	}
}

func TestProcessSpanJoinsTheMessagesTrace(t *testing.T) {
	tr, rec := traced(t)
	pctx, producer := tr.Start(context.Background(), "produce")
	h := withTraceContext(pctx, []PushItem{{Queue: "q"}})[0].Headers
	producer.End()
	psc := producer.SpanContext()

	ctx, span := startProcess(context.Background(), Message{Queue: "q", Partition: "p", Offset: 7, Headers: h}, "g")
	if !trace.SpanContextFromContext(ctx).Equal(span.SpanContext()) {
		t.Fatal("the handler's context does not carry the consumer span")
	}
	endProcess(span, fmt.Errorf("boom"))
	// A message without (or with a broken) traceparent: the span starts
	// from the caller's context, without links.
	_, plain := startProcess(context.Background(), Message{Queue: "q", Headers: map[string]string{"traceparent": "junk"}}, "")
	endProcess(plain, nil)

	ended := rec.Ended()
	s := ended[len(ended)-2]
	if s.Name() != "process q" || s.SpanKind() != trace.SpanKindConsumer {
		t.Errorf("%q %v", s.Name(), s.SpanKind())
	}
	if s.SpanContext().TraceID() != psc.TraceID() || s.Parent().SpanID() != psc.SpanID() {
		t.Errorf("parent %v, want the producer %v", s.Parent(), psc)
	}
	if len(s.Links()) != 1 || s.Links()[0].SpanContext.SpanID() != psc.SpanID() {
		t.Errorf("links %v", s.Links())
	}
	if s.Status().Code.String() != "Error" {
		t.Errorf("status %v after a failed handler", s.Status())
	}
	p := ended[len(ended)-1]
	if p.Parent().IsValid() || len(p.Links()) != 0 {
		t.Errorf("a junk traceparent gave parent %v links %v", p.Parent(), p.Links())
	}
}
