package queenside_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	queenside "github.com/queenside/queenside/clients/go"
)

// Through a real sidecar: the headers Push adds come back on pop untouched,
// and Consume runs the handler in a span of the producer's trace.
func TestConsumeJoinsTheProducersTrace(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() {
		otel.SetTracerProvider(noop.NewTracerProvider())
		otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator())
	})
	c := dial(t, startSidecar(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	pctx, producer := tp.Tracer("test").Start(ctx, "produce")
	it, _ := queenside.Item("traced", 1)
	it.Headers = map[string]string{"app": "x"}
	if _, err := c.Push(pctx, it); err != nil {
		t.Fatal(err)
	}
	producer.End()
	if len(it.Headers) != 1 {
		t.Fatalf("Push changed the caller's headers: %v", it.Headers)
	}
	var got queenside.Message
	var handled trace.SpanContext
	_, err := c.Consume(ctx, "traced", func(hctx context.Context, m queenside.Message) error {
		got, handled = m, trace.SpanContextFromContext(hctx)
		cancel()
		return nil
	}, queenside.ConsumeOptions{WaitMs: 200})
	if err != nil {
		t.Fatal(err)
	}
	psc := producer.SpanContext()
	if got.Headers["app"] != "x" || got.Headers["traceparent"] == "" {
		t.Fatalf("popped headers %v", got.Headers)
	}
	if handled.TraceID() != psc.TraceID() {
		t.Fatalf("handler in trace %s, want the producer's %s", handled.TraceID(), psc.TraceID())
	}
	for _, s := range rec.Ended() {
		if s.SpanContext().SpanID() == handled.SpanID() {
			if s.Parent().SpanID() != psc.SpanID() || len(s.Links()) != 1 {
				t.Fatalf("consumer span parent %v links %v", s.Parent(), s.Links())
			}
			return
		}
	}
	t.Fatal("the consumer span was not ended")
}
