package telemetry

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/queenside/queenside/protocol"
)

const (
	traceA = "4bf92f3577b34da6a3ce929d0e0e4736"
	spanA  = "00f067aa0ba902b7"
	traceB = "0af7651916cd43dd8448eb211c80319c"
	spanB  = "b7ad6b7169203331"
)

func tp(trace, span string) string { return "00-" + trace + "-" + span + "-01" }

// record makes the package's spans with an in-memory recorder for the test.
func record(t *testing.T) *tracetest.SpanRecorder {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	Use(provider)
	t.Cleanup(func() { Use(nil); provider.Shutdown(context.Background()) })
	return rec
}

func TestRemoteParentIgnoresWhatIsNotAValidTraceparent(t *testing.T) {
	for _, h := range []map[string]string{
		nil,
		{},
		{"other": "x"},
		{"traceparent": ""},
		{"traceparent": "garbage"},
		{"traceparent": "00-" + traceA + "-" + spanA},                                     // no flags
		{"traceparent": "00-" + traceA + "-" + spanA + "-01-extra"},                       // version 00 has no more fields
		{"traceparent": "ff-" + traceA + "-" + spanA + "-01"},                             // forbidden version
		{"traceparent": "00-00000000000000000000000000000000-" + spanA + "-01"},           // zero trace id
		{"traceparent": "00-" + traceA + "-0000000000000000-01"},                          // zero span id
		{"traceparent": "00-" + traceA[:31] + "g-" + spanA + "-01"},                       // not hex
		{"traceparent": "00-" + traceA + "-" + spanA + "-1"},                              // short flags
		{"Traceparent": tp(traceA, spanA)},                                                // the key is lower case
		{"traceparent": "00-" + "4BF92F3577B34DA6A3CE929D0E0E4736" + "-" + spanA + "-01"}, // upper case hex
	} {
		if sc, ok := RemoteParent(h); ok {
			t.Errorf("%v: took %v as a parent", h, sc)
		}
		packed, err := protocol.Marshal(h)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := RemoteParentPacked(packed); ok {
			t.Errorf("%v packed: took it as a parent", h)
		}
	}
	for _, packed := range [][]byte{nil, {0xc1}, {0x81}, []byte("not msgpack")} {
		if _, ok := RemoteParentPacked(packed); ok {
			t.Errorf("%x: took it as a parent", packed)
		}
	}
}

func TestRemoteParentReadsTraceparentAndTracestate(t *testing.T) {
	h := map[string]string{"traceparent": tp(traceA, spanA), "tracestate": "vendor=x", "other": "y"}
	sc, ok := RemoteParent(h)
	if !ok || sc.TraceID().String() != traceA || sc.SpanID().String() != spanA || !sc.IsSampled() || !sc.IsRemote() {
		t.Fatalf("got %v %v", sc, ok)
	}
	if sc.TraceState().Get("vendor") != "x" {
		t.Fatalf("tracestate %q", sc.TraceState().String())
	}
	packed, _ := protocol.Marshal(h)
	if sc2, ok := RemoteParentPacked(packed); !ok || !sc2.Equal(sc) {
		t.Fatalf("packed: got %v %v", sc2, ok)
	}
}

func TestPushSpanParentIsTheFirstTraceparentAndLinksTheOthers(t *testing.T) {
	rec := record(t)
	items := []protocol.PushItem{
		{Queue: "q", Partition: "a"},
		{Queue: "q", Partition: "a", Headers: map[string]string{"traceparent": "broken"}},
		{Queue: "q", Partition: "b", Headers: map[string]string{"traceparent": tp(traceA, spanA)}},
		{Queue: "r", Partition: "a", Headers: map[string]string{"traceparent": tp(traceB, spanB)}},
		{Queue: "r", Partition: "a", Headers: map[string]string{"traceparent": tp(traceA, spanA)}}, // again
	}
	_, span := StartPush(context.Background(), items)
	EndPush(span, []protocol.PushResult{{Status: protocol.StatusQueued}, {Status: protocol.StatusFailed}}, nil)
	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans", len(spans))
	}
	s := spans[0]
	if s.Name() != "push" || s.SpanKind() != trace.SpanKindProducer {
		t.Errorf("name %q kind %v", s.Name(), s.SpanKind())
	}
	if s.Parent().TraceID().String() != traceA || s.Parent().SpanID().String() != spanA || !s.Parent().IsRemote() {
		t.Errorf("parent %v", s.Parent())
	}
	if len(s.Links()) != 1 || s.Links()[0].SpanContext.TraceID().String() != traceB {
		t.Errorf("links %v", s.Links())
	}
	attrs := attrMap(s.Attributes())
	want := map[string]string{
		"messaging.system":              "queenside",
		"messaging.operation.type":      "send",
		"messaging.batch.message_count": "5",
		"queenside.queues":              `["q","r"]`,
		"queenside.partitions":          `["q/a","q/b","r/a"]`,
		"queenside.partitions.count":    "3",
		"queenside.push.queued":         "1",
		"queenside.push.failed":         "1",
	}
	for k, v := range want {
		if attrs[k] != v {
			t.Errorf("%s = %q, want %q", k, attrs[k], v)
		}
	}
	if _, has := attrs["messaging.destination.name"]; has {
		t.Errorf("a destination name for two queues")
	}
}

func TestPushSpanCapsItsLists(t *testing.T) {
	rec := record(t)
	var items []protocol.PushItem
	for i := range 30 {
		items = append(items, protocol.PushItem{Queue: fmt.Sprintf("q%d", i%15), Partition: fmt.Sprint(i),
			Headers: map[string]string{"traceparent": tp(traceA, fmt.Sprintf("%016x", i+1))}})
	}
	_, span := StartPush(context.Background(), items)
	EndPush(span, nil, nil)
	s := rec.Ended()[0]
	attrs := s.Attributes()
	for _, kv := range attrs {
		if (kv.Key == "queenside.queues" || kv.Key == "queenside.partitions") && len(kv.Value.AsStringSlice()) != MaxListed {
			t.Errorf("%s has %d entries", kv.Key, len(kv.Value.AsStringSlice()))
		}
	}
	if m := attrMap(attrs); m["queenside.partitions.count"] != "30" {
		t.Errorf("partition count %s", m["queenside.partitions.count"])
	}
	if len(s.Links()) != MaxLinks-1 { // the first is the parent
		t.Errorf("%d links", len(s.Links()))
	}
}

func TestSingleQueuePushNamesIt(t *testing.T) {
	rec := record(t)
	_, span := StartPush(context.Background(), []protocol.PushItem{{Queue: "orders"}, {Queue: "orders", Partition: "x"}})
	EndPush(span, nil, nil)
	s := rec.Ended()[0]
	if s.Name() != "push orders" || attrMap(s.Attributes())["messaging.destination.name"] != "orders" {
		t.Fatalf("%q %v", s.Name(), s.Attributes())
	}
	if s.Parent().IsValid() {
		t.Fatalf("a parent without any traceparent: %v", s.Parent())
	}
}

func TestDBSpanOfFusedRequestsParentsTheFirstAndLinksTheOthers(t *testing.T) {
	rec := record(t)
	t1 := tracer()
	var ctxs []context.Context
	var reqs []trace.Span
	for i := range 3 {
		ctx, s := t1.Start(context.Background(), fmt.Sprint("request ", i))
		ctxs, reqs = append(ctxs, ctx), append(reqs, s)
	}
	db := StartDB(DBPush, ctxs, MessageCount(7))
	db.End()
	for _, s := range reqs {
		s.End()
	}
	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		byName[s.Name()] = s
	}
	d := byName["db push"]
	if d == nil {
		t.Fatalf("no db span among %v", byName)
	}
	if d.Parent().SpanID() != reqs[0].SpanContext().SpanID() {
		t.Errorf("parent %v, want request 0", d.Parent())
	}
	if len(d.Links()) != 2 || d.Links()[0].SpanContext.SpanID() != reqs[1].SpanContext().SpanID() ||
		d.Links()[1].SpanContext.SpanID() != reqs[2].SpanContext().SpanID() {
		t.Errorf("links %v", d.Links())
	}
	for i := 1; i < 3; i++ {
		r := byName[fmt.Sprint("request ", i)]
		if len(r.Links()) != 1 || r.Links()[0].SpanContext.SpanID() != d.SpanContext().SpanID() {
			t.Errorf("request %d links %v, want the db span", i, r.Links())
		}
	}
	if m := attrMap(d.Attributes()); m["queenside.fused.requests"] != "3" || m["db.system.name"] != "postgresql" {
		t.Errorf("attributes %v", m)
	}
}

func TestForRequestsServesSeveralPops(t *testing.T) {
	rec := record(t)
	var spans []trace.Span
	for i := range 2 {
		_, s := tracer().Start(context.Background(), fmt.Sprint("pop ", i))
		spans = append(spans, s)
	}
	ctx := ForRequests(context.Background(), spans)
	db := StartDB(DBRound, []context.Context{ctx})
	db.End()
	d := rec.Ended()[0]
	if d.Parent().SpanID() != spans[0].SpanContext().SpanID() || len(d.Links()) != 1 ||
		d.Links()[0].SpanContext.SpanID() != spans[1].SpanContext().SpanID() {
		t.Fatalf("parent %v links %v", d.Parent(), d.Links())
	}
}

func TestPopSpanLinksTheMessagesTraceContexts(t *testing.T) {
	rec := record(t)
	_, span := StartPop(context.Background(), protocol.PopArgs{Queue: "q", Group: "g", Batch: 10})
	var msgs []protocol.Message
	for i := range 40 {
		msgs = append(msgs, protocol.Message{Headers: map[string]string{"traceparent": tp(traceB, fmt.Sprintf("%016x", i/2+1))}})
	}
	msgs = append(msgs, protocol.Message{Headers: map[string]string{"traceparent": "bad"}}, protocol.Message{})
	EndPop(span, protocol.PopResult{Messages: msgs}, nil)
	s := rec.Ended()[0]
	if s.Name() != "pop q" || len(s.Links()) != MaxLinks {
		t.Fatalf("%q with %d links", s.Name(), len(s.Links()))
	}
	if m := attrMap(s.Attributes()); m["messaging.consumer.group.name"] != "g" || m["messaging.batch.message_count"] != "42" {
		t.Fatalf("attributes %v", m)
	}
}

func TestReplaySpanLinksTheSpooledHeaders(t *testing.T) {
	rec := record(t)
	a, _ := protocol.Marshal(map[string]string{"traceparent": tp(traceA, spanA)})
	b, _ := protocol.Marshal(map[string]string{"traceparent": tp(traceB, spanB)})
	parent, ps := tracer().Start(context.Background(), "outer")
	_, span := StartReplay(parent, "seg", [][]byte{a, a, nil, {0xc1}, b})
	span.End()
	ps.End()
	s := rec.Ended()[0]
	if s.Name() != "spool replay" || s.Parent().IsValid() || len(s.Links()) != 2 {
		t.Fatalf("%q parent %v links %v", s.Name(), s.Parent(), s.Links())
	}
}

// Off, the request paths allocate nothing and start nothing.
func TestOffCostsNothing(t *testing.T) {
	Use(nil)
	items := []protocol.PushItem{{Queue: "q", Headers: map[string]string{"traceparent": tp(traceA, spanA)}}}
	results := []protocol.PushResult{{Status: protocol.StatusQueued}}
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		c, span := StartPush(ctx, items)
		if c != ctx || span.IsRecording() {
			t.Fatal("a span while off")
		}
		EndPush(span, results, nil)
		_, span = StartPop(ctx, protocol.PopArgs{Queue: "q"})
		EndPop(span, protocol.PopResult{}, nil)
		_, span = StartAck(ctx, nil)
		EndAck(span, protocol.AckResult{}, nil)
		End(StartDB(DBPush, []context.Context{ctx}), nil)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations a request while off", allocs)
	}
}

func TestSetupWithoutEndpointStartsNothing(t *testing.T) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		t.Setenv(k, "")
	}
	before := runtime.NumGoroutine()
	stop := Setup(context.Background(), "test", nil)
	if Enabled() {
		t.Fatal("tracing on without an endpoint")
	}
	if after := runtime.NumGoroutine(); after != before {
		t.Fatalf("%d goroutines, %d before", after, before)
	}
	stop()
}

func TestSetupHonoursTheEnvironment(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1") // nothing listens: export fails quietly
	t.Setenv("OTEL_SDK_DISABLED", "true")
	Setup(context.Background(), "test", nil)()
	if Enabled() {
		t.Fatal("on although OTEL_SDK_DISABLED")
	}
	t.Setenv("OTEL_SDK_DISABLED", "")
	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	Setup(context.Background(), "test", nil)()
	if Enabled() {
		t.Fatal("on although OTEL_TRACES_EXPORTER=none")
	}
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "200")
	stop := Setup(context.Background(), "test", nil)
	if !Enabled() {
		t.Fatal("off with an endpoint")
	}
	_, span := StartPush(context.Background(), []protocol.PushItem{{Queue: "q"}})
	EndPush(span, nil, nil)
	start := time.Now()
	stop() // the flush fails: nothing listens
	if Enabled() {
		t.Fatal("still on after stopping")
	}
	if d := time.Since(start); d > flushTimeout+time.Second {
		t.Fatalf("stopping took %v", d)
	}
}

func attrMap(kvs []attribute.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value.Emit()
	}
	return m
}
