package sidecar

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/pgtest"
)

// otlpReceiver is an OTLP/HTTP trace endpoint: it keeps what it is sent.
type otlpReceiver struct {
	*httptest.Server
	mu       sync.Mutex
	requests int
	spans    []*tracepb.Span
	services []string // service.name of each resource received
}

// newOTLPReceiver listens on addr ("" for any free port of 127.0.0.1).
func newOTLPReceiver(t *testing.T, addr string) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(r.serve))
	if addr != "" {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		srv.Listener.Close()
		srv.Listener = ln
	}
	srv.Start()
	t.Cleanup(srv.Close)
	r.Server = srv
	return r
}

func (r *otlpReceiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		http.Error(w, "want POST /v1/traces", http.StatusNotFound)
		return
	}
	body := io.Reader(req.Body)
	if req.Header.Get("Content-Encoding") == "gzip" {
		gz, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = gz
	}
	raw, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var export coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(raw, &export); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.requests++
	for _, rs := range export.GetResourceSpans() {
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				r.services = append(r.services, kv.GetValue().GetStringValue())
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			r.spans = append(r.spans, ss.GetSpans()...)
		}
	}
	r.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out) //nolint:errcheck
}

func (r *otlpReceiver) received() (requests int, spans []*tracepb.Span, services []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests, append([]*tracepb.Span(nil), r.spans...), append([]string(nil), r.services...)
}

// await returns the spans received once every named one has arrived.
func (r *otlpReceiver) await(t *testing.T, names ...string) []*tracepb.Span {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, spans, _ := r.received()
		missing := ""
		for _, n := range names {
			if spanNamed(spans, n) == nil {
				missing = n
				break
			}
		}
		if missing == "" {
			return spans
		}
		if time.Now().After(deadline) {
			var got []string
			for _, s := range spans {
				got = append(got, s.GetName())
			}
			t.Fatalf("no span %q received; got %v", missing, got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func spanNamed(spans []*tracepb.Span, name string) *tracepb.Span {
	for _, s := range spans {
		if s.GetName() == name {
			return s
		}
	}
	return nil
}

func spanAttr(s *tracepb.Span, key string) string {
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() == key {
			if v, ok := kv.GetValue().GetValue().(*commonpb.AnyValue_IntValue); ok {
				return strconv.FormatInt(v.IntValue, 10)
			}
			return kv.GetValue().GetStringValue()
		}
	}
	return ""
}

// recordClientSpans registers an SDK tracer provider that records in
// memory, and the W3C propagator, as a traced program using the Go client
// would; both are put back to no-ops after the test.
func recordClientSpans(t *testing.T) (trace.Tracer, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() {
		otel.SetTracerProvider(noop.NewTracerProvider())
		otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator())
		tp.Shutdown(context.Background()) //nolint:errcheck
	})
	return tp.Tracer("producer"), rec
}

// unsetTracingEnv clears the OpenTelemetry variables a sidecar started by
// the test would inherit, and puts them back after it.
func unsetTracingEnv(t *testing.T) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED",
		"OTEL_TRACES_EXPORTER", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG", "OTEL_BSP_SCHEDULE_DELAY", "OTEL_SERVICE_NAME"} {
		t.Setenv(k, "") // restored after the test
		os.Unsetenv(k)
	}
}

// produceAndConsume pushes one message to queue with a producer span
// active, then handles it with the client's consume loop. It returns the
// producer span and the span context the handler ran in.
func produceAndConsume(t *testing.T, socket, queue string, tr trace.Tracer) (producer trace.Span, handler trace.SpanContext) {
	t.Helper()
	c := dialClient(t, socket)
	ctx, producer := tr.Start(testContext(t), "produce")
	res, err := c.Push(ctx, item(t, queue, "eu", "traced", "hello"))
	producer.End()
	if err != nil || res[0].Status != protocol.StatusQueued {
		t.Fatalf("push: %v %+v", err, res)
	}
	cctx, cancel := context.WithTimeout(testContext(t), 20*time.Second)
	defer cancel()
	_, err = c.Consume(cctx, queue, func(ctx context.Context, m queenside.Message) error {
		handler = trace.SpanContextFromContext(ctx)
		cancel()
		return nil
	}, queenside.ConsumeOptions{WaitMs: 500, Batch: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !handler.IsValid() {
		t.Fatal("the message was not handled in a span")
	}
	return producer, handler
}

func TestTracingJoinsProducerSidecarAndConsumer(t *testing.T) {
	unsetTracingEnv(t)
	recv := newOTLPReceiver(t, "127.0.0.1:0")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.URL)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "20")
	t.Setenv("OTEL_TRACES_SAMPLER", "parentbased_always_on")
	t.Setenv("OTEL_SERVICE_NAME", "queenside-under-test")
	p := startServe(t, pgtest.NewDatabase(t))
	tr, rec := recordClientSpans(t)

	producer, handler := produceAndConsume(t, p.socket, "traced", tr)

	spans := recv.await(t, "push traced", "db push", "pop traced", "ack", "db round")
	psc := producer.SpanContext()
	// The sidecar's push span of the traced request is the producer's child.
	var push *tracepb.Span
	for _, s := range spans {
		if s.GetName() == "push traced" && bytes.Equal(s.GetTraceId(), traceID(psc)) {
			push = s
		}
	}
	if push == nil {
		t.Fatalf("no push span in the producer's trace %s", psc.TraceID())
	}
	if !bytes.Equal(push.GetParentSpanId(), spanID(psc)) {
		t.Errorf("push span's parent is %x, want the producer span %s", push.GetParentSpanId(), psc.SpanID())
	}
	if push.GetKind() != tracepb.Span_SPAN_KIND_PRODUCER || spanAttr(push, "messaging.system") != "queenside" ||
		spanAttr(push, "messaging.destination.name") != "traced" || spanAttr(push, "messaging.destination.partition.id") != "eu" {
		t.Errorf("push span %v", push)
	}
	// Its database transaction is its child.
	var db *tracepb.Span
	for _, s := range spans {
		if s.GetName() == "db push" && bytes.Equal(s.GetParentSpanId(), push.GetSpanId()) {
			db = s
		}
	}
	if db == nil || !bytes.Equal(db.GetTraceId(), push.GetTraceId()) {
		t.Errorf("no db push span child of the push span")
	}
	// The pop that delivered it links the producer's context.
	var pop *tracepb.Span
	for _, s := range spans {
		for _, l := range s.GetLinks() {
			if s.GetName() == "pop traced" && bytes.Equal(l.GetSpanId(), spanID(psc)) && bytes.Equal(l.GetTraceId(), traceID(psc)) {
				pop = s
			}
		}
	}
	if pop == nil {
		t.Fatalf("no pop span links the producer span")
	}
	var round *tracepb.Span
	for _, s := range spans {
		if s.GetName() == "db round" && bytes.Equal(s.GetParentSpanId(), pop.GetSpanId()) {
			round = s
		}
	}
	if round == nil {
		t.Errorf("no db round span child of the pop span")
	}
	if spanNamed(spans, "ack") == nil {
		t.Errorf("no ack span")
	}
	if _, _, services := recv.received(); len(services) == 0 || services[0] != "queenside-under-test" {
		t.Errorf("service names %v, want OTEL_SERVICE_NAME's", services)
	}

	// The consumer span: in the producer's trace, its child, and linked.
	var process sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "process traced" && s.SpanContext().SpanID() == handler.SpanID() {
			process = s
		}
	}
	if process == nil {
		t.Fatalf("no consumer span for the handled message")
	}
	if process.SpanContext().TraceID() != psc.TraceID() || process.Parent().SpanID() != psc.SpanID() || !process.Parent().IsRemote() {
		t.Errorf("consumer span %s parent %v, want the producer %v", process.SpanContext().TraceID(), process.Parent(), psc)
	}
	if process.SpanKind() != trace.SpanKindConsumer || len(process.Links()) != 1 || !process.Links()[0].SpanContext.Equal(psc.WithRemote(true)) {
		t.Errorf("consumer span kind %v links %v", process.SpanKind(), process.Links())
	}
}

func traceID(sc trace.SpanContext) []byte { id := sc.TraceID(); return id[:] }
func spanID(sc trace.SpanContext) []byte  { id := sc.SpanID(); return id[:] }

// stopServe drains a serve process, as its pod's SIGTERM would, and waits
// for it to exit.
func stopServe(t *testing.T, p *serveProcess) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("serve exited with %v", err)
	}
}

// The spans still in the batch when the sidecar stops are flushed: with a
// schedule delay of ten minutes, only the shutdown can have sent them.
func TestTracingFlushesOnShutdown(t *testing.T) {
	unsetTracingEnv(t)
	recv := newOTLPReceiver(t, "127.0.0.1:0")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", recv.URL+"/v1/traces")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "600000")
	p := startServe(t, pgtest.NewDatabase(t))
	tr, _ := recordClientSpans(t)
	produceAndConsume(t, p.socket, "flushed", tr)
	if n, _, _ := recv.received(); n != 0 {
		t.Fatalf("%d exports before the shutdown; the schedule delay was not honoured", n)
	}
	stopServe(t, p)
	_, spans, _ := recv.received()
	for _, name := range []string{"push flushed", "db push", "pop flushed", "ack"} {
		if spanNamed(spans, name) == nil {
			t.Errorf("span %q not flushed", name)
		}
	}
}

// Without the environment, the sidecar exports nothing. The receiver
// listens where an exporter left without an endpoint would send, the OTLP
// default localhost:4318, when that port is free.
func TestNoTracingWithoutTheEnvironment(t *testing.T) {
	unsetTracingEnv(t)
	addr := "127.0.0.1:4318"
	if ln, err := net.Listen("tcp", addr); err != nil {
		t.Logf("%s is taken (%v): the receiver listens elsewhere, which proves less", addr, err)
		addr = "127.0.0.1:0"
	} else {
		ln.Close()
	}
	recv := newOTLPReceiver(t, addr)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "20")
	p := startServe(t, pgtest.NewDatabase(t))
	tr, _ := recordClientSpans(t)
	produceAndConsume(t, p.socket, "untraced", tr)
	stopServe(t, p)
	if n, spans, _ := recv.received(); n != 0 || len(spans) != 0 {
		t.Fatalf("%d exports with %d spans without any OTEL_EXPORTER_OTLP_*ENDPOINT", n, len(spans))
	}
}

// Through an outage: the push span of a buffered push has the spool write
// as its child, and the replay, once PostgreSQL is back, links the
// producer's context kept in the spooled item's headers, with the replay's
// database transaction as its child.
func TestTracingSpoolWriteAndReplay(t *testing.T) {
	unsetTracingEnv(t)
	recv := newOTLPReceiver(t, "127.0.0.1:0")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.URL)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "20")
	pg := startPrivatePostgres(t)
	sc := launchSidecar(t, pg.url, t.TempDir())
	sc.waitReplayed(t)
	tr, _ := recordClientSpans(t)
	c := dialClient(t, sc.socket)

	pg.stop(t)
	ctx, producer := tr.Start(testContext(t), "produce")
	res, err := c.Push(ctx, item(t, "spooled", "", "while-down", 1))
	producer.End()
	if err != nil || res[0].Status != protocol.StatusBuffered {
		t.Fatalf("push during the outage: %v %+v, want buffered", err, res)
	}
	pg.restart(t)
	sc.waitReplayed(t)

	spans := recv.await(t, "push spooled", "spool write", "spool replay")
	psc := producer.SpanContext()
	var push, write, replay *tracepb.Span
	for _, s := range spans {
		switch {
		case s.GetName() == "push spooled" && bytes.Equal(s.GetParentSpanId(), spanID(psc)):
			push = s
		case s.GetName() == "spool replay":
			for _, l := range s.GetLinks() {
				if bytes.Equal(l.GetSpanId(), spanID(psc)) {
					replay = s
				}
			}
		}
	}
	if push == nil || replay == nil {
		t.Fatalf("push span %v, replay span linking the producer %v", push, replay)
	}
	for _, s := range spans {
		if s.GetName() == "spool write" && bytes.Equal(s.GetParentSpanId(), push.GetSpanId()) {
			write = s
		}
	}
	if write == nil {
		t.Errorf("no spool write span child of the push span")
	}
	if spanAttr(push, "queenside.push.buffered") != "1" {
		t.Errorf("push span buffered = %q, want 1", spanAttr(push, "queenside.push.buffered"))
	}
	if len(replay.GetParentSpanId()) != 0 {
		t.Errorf("the replay span has a parent: it is the sidecar's own work")
	}
	recv.await(t, "db push")
	_, spans, _ = recv.received()
	found := false
	for _, s := range spans {
		found = found || s.GetName() == "db push" && bytes.Equal(s.GetParentSpanId(), replay.GetSpanId())
	}
	if !found {
		t.Errorf("no db push span child of the replay span")
	}
}
