package sidecar

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/store"
)

func wantError(t *testing.T, resp protocol.Response, id uint64, code protocol.Code) {
	t.Helper()
	if resp.Error == nil {
		t.Fatalf("response %d: want error %s, got a result", resp.ID, code)
	}
	if resp.ID != id || resp.Error.Code != code {
		t.Fatalf("got id %d error %s (%s), want id %d error %s", resp.ID, resp.Error.Code, resp.Error.Message, id, code)
	}
	if resp.Error.Retryable != code.Retryable() {
		t.Fatalf("%s answered retryable=%t", code, resp.Error.Retryable)
	}
}

// stillServes asserts that a fresh connection is served normally.
func stillServes(t *testing.T, ts *testSidecar) {
	t.Helper()
	if h, err := ts.client(t).Health(testContext(t)); err != nil || h.Status != protocol.HealthOK {
		t.Fatalf("after bad input the sidecar no longer serves: %v %+v", err, h)
	}
}

func lengthPrefix(n uint32) []byte { return binary.BigEndian.AppendUint32(nil, n) }

func TestFrameOverTheLimitClosesTheConnection(t *testing.T) {
	ts := startSidecar(t, "", Options{MaxFrameBytes: 1024})
	for _, n := range []uint32{1025, 0, 0xffffffff} {
		r := dialRaw(t, ts.socket)
		r.write(lengthPrefix(n))
		wantError(t, r.read(), 0, protocol.CodeFrameTooLarge)
		r.closed()
	}
	// A push whose payload makes the frame too large is refused the same way.
	r := dialRaw(t, ts.socket)
	r.sendRequest(1, protocol.OpPush, protocol.PushArgs{Items: []protocol.PushItem{item(t, "q", "", "", strings.Repeat("x", 2000))}})
	wantError(t, r.read(), 0, protocol.CodeFrameTooLarge)
	r.closed()
	stillServes(t, ts)
}

func TestMalformedBodiesKeepTheConnection(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	r := dialRaw(t, ts.socket)
	cases := []struct {
		name string
		body []byte
		id   uint64
	}{
		{"garbage", []byte{0xc1, 0xff, 0x00}, 0},
		{"array", mustMarshal(t, []any{1, "push"}), 0},
		{"string", mustMarshal(t, "hello"), 0},
		{"missing id", mustMarshal(t, map[string]any{"op": "health"}), 0},
		{"zero id", mustMarshal(t, map[string]any{"id": 0, "op": "health"}), 0},
		{"missing op", mustMarshal(t, map[string]any{"id": 3}), 3},
		{"op not a string", mustMarshal(t, map[string]any{"id": 4, "op": 12}), 4},
		{"args not a map", mustMarshal(t, map[string]any{"id": 5, "op": "push", "args": []int{1}}), 5},
		{"truncated map", mustMarshal(t, protocol.Request{ID: 6, Op: "health"})[:5], 6}, // the id came first
		{"trailing bytes", append(mustMarshal(t, protocol.Request{ID: 7, Op: "health"}), 0x01), 7},
	}
	for _, tc := range cases {
		r.sendBody(tc.body)
		resp := r.read()
		t.Logf("%s: %v", tc.name, resp.Error)
		wantError(t, resp, tc.id, protocol.CodeBadRequest)
	}
	// The framing was intact throughout: the same connection still works.
	r.sendRequest(99, protocol.OpHealth, nil)
	if resp := r.read(); resp.ID != 99 || resp.Error != nil {
		t.Fatalf("after bad bodies: %+v", resp)
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := protocol.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestBadRequestsGetTheirDocumentedCodes(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	r := dialRaw(t, ts.socket)
	long := strings.Repeat("q", protocol.MaxNameBytes+1)
	cases := []struct {
		op   string
		args any
		code protocol.Code
	}{
		{"nosuchop", nil, protocol.CodeUnknownOp},
		{protocol.OpHello, map[string]any{"protocol": 2}, protocol.CodeUnsupported},
		{protocol.OpHello, map[string]any{"protocol": "1"}, protocol.CodeInvalidArgument},
		{protocol.OpPush, map[string]any{}, protocol.CodeInvalidArgument},
		{protocol.OpPush, map[string]any{"items": []any{}}, protocol.CodeInvalidArgument},
		{protocol.OpPush, map[string]any{"items": "x"}, protocol.CodeInvalidArgument},
		{protocol.OpConfigure, map[string]any{"queue": "q", "options": map[string]any{"leaseSeconds": "60"}}, protocol.CodeInvalidArgument},
		{protocol.OpConfigure, map[string]any{"queue": "q", "options": map[string]any{"leaseSeconds": 0}}, protocol.CodeInvalidArgument},
		{protocol.OpConfigure, map[string]any{"queue": "q", "options": map[string]any{"dedupWindowSeconds": -1}}, protocol.CodeInvalidArgument},
		{protocol.OpConfigure, map[string]any{"options": map[string]any{}}, protocol.CodeInvalidArgument},
		{protocol.OpStats, map[string]any{"queue": long}, protocol.CodeInvalidArgument},
		{protocol.OpStats, map[string]any{"queue": "bad name"}, protocol.CodeInvalidArgument},
		{protocol.OpStats, map[string]any{"queue": 7}, protocol.CodeInvalidArgument},
		{protocol.OpStats, map[string]any{"queue": "never-created"}, protocol.CodeNotFound},
	}
	for i, tc := range cases {
		id := uint64(i + 1)
		r.sendRequest(id, tc.op, tc.args)
		resp := r.read()
		t.Logf("%s %v: %v", tc.op, tc.args, resp.Error)
		wantError(t, resp, id, tc.code)
	}
	stillServes(t, ts)
}

func TestMalformedItemFailsAlone(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	r := dialRaw(t, ts.socket)
	good := map[string]any{"queue": "q", "payload": 1}
	items := []any{
		good,
		map[string]any{"queue": 5, "payload": 1}, // wrong type
		map[string]any{"queue": "q"},             // no payload
		map[string]any{"queue": "has space", "payload": 1},                   // bad name
		map[string]any{"queue": strings.Repeat("a", 201), "payload": 1},      // too long
		map[string]any{"queue": "q", "partition": "tab\there", "payload": 1}, // control character
		map[string]any{"queue": "q", "partition": strings.Repeat("p", 201), "payload": 1},
		map[string]any{"queue": "q", "payload": 1, "transactionId": ""}, // empty id
		map[string]any{"queue": "q", "payload": 1, "transactionId": strings.Repeat("t", 257)},
		map[string]any{"queue": "q", "payload": 1, "transactionId": "nul\x00inside"},  // PostgreSQL text cannot hold NUL
		map[string]any{"queue": "q", "payload": 1, "transactionId": "\xff\xfe"},       // not UTF-8
		map[string]any{"queue": "q", "payload": 1, "headers": map[string]any{"k": 1}}, // header not a string
		"not a map",
		good,
	}
	r.sendRequest(1, protocol.OpPush, map[string]any{"items": items})
	resp := r.read()
	if resp.Error != nil {
		t.Fatalf("push failed as a whole: %v", resp.Error)
	}
	var reply protocol.PushReply
	if err := protocol.Unmarshal(resp.Result, &reply); err != nil {
		t.Fatal(err)
	}
	if len(reply.Results) != len(items) {
		t.Fatalf("%d results for %d items", len(reply.Results), len(items))
	}
	for i, res := range reply.Results {
		wantStatus := protocol.StatusFailed
		if i == 0 || i == len(items)-1 {
			wantStatus = protocol.StatusQueued
		}
		if res.Index != i || res.Status != wantStatus {
			t.Fatalf("item %d: index %d status %s (%v), want %s", i, res.Index, res.Status, res.Error, wantStatus)
		}
		if wantStatus == protocol.StatusFailed && (res.Error == nil || res.Error.Code != protocol.CodeInvalidArgument) {
			t.Fatalf("item %d: error %v, want invalid_argument", i, res.Error)
		}
		t.Logf("item %d: %s %v", i, res.Status, res.Error)
	}
	checkGapless(t, storedMessages(t, ts.pool, "q", protocol.DefaultPartition), 2)
}

func TestDisconnectMidRequestLosesNothingCommitted(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	r := dialRaw(t, ts.socket)
	var items []protocol.PushItem
	for i := 0; i < 1000; i++ {
		items = append(items, item(t, "q", "p", fmt.Sprintf("hangup-%d", i), i))
	}
	r.sendRequest(1, protocol.OpPush, protocol.PushArgs{Items: items})
	r.nc.Close() // hang up before the answer
	// The push was received whole: it runs to its commit all the same, and
	// every offset it took is there.
	deadline := time.Now().Add(20 * time.Second)
	for {
		msgs := storedMessages(t, ts.pool, "q", "p")
		if len(msgs) == len(items) {
			checkGapless(t, msgs, len(items))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d messages stored after the client hung up", len(msgs), len(items))
		}
		time.Sleep(20 * time.Millisecond)
	}
	stillServes(t, ts)
}

func TestDeadlineExceeded(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	ts.srv.ops["sleep"] = opSpec{fn: func(ctx context.Context, _ []byte) (any, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}, local: true}
	r := dialRaw(t, ts.socket)
	body := mustMarshal(t, map[string]any{"id": 1, "op": "sleep", "timeoutMs": 50})
	start := time.Now()
	r.sendBody(body)
	wantError(t, r.read(), 1, protocol.CodeDeadlineExceeded)
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("deadline of 50 ms answered after %v", took)
	}
}

// A push that cannot finish in time is answered deadline_exceeded. Whether
// it still commits afterwards is a race with PostgreSQL's cancellation, so
// what holds is what a client relies on: a retry with the same transaction
// id stores the message exactly once.
func TestPushPastItsDeadlineThenRetried(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	mustPush(t, c, item(t, "q", "p", "first", 1))
	// Hold the partition's row lock so the next push has to wait for it.
	ctx := testContext(t)
	var id int64
	if err := ts.pool.QueryRow(ctx, "SELECT id FROM queenside.partition_names WHERE name = 'p'").Scan(&id); err != nil {
		t.Fatal(err)
	}
	tx, err := ts.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // a no-op once rolled back
	// By its id: on Citus a lock must name the rows' shard.
	if _, err := tx.Exec(ctx, "SELECT 1 FROM queenside.partitions WHERE id = $1 FOR UPDATE", id); err != nil {
		t.Fatal(err)
	}
	r := dialRaw(t, ts.socket)
	args := mustMarshal(t, protocol.PushArgs{Items: []protocol.PushItem{item(t, "q", "p", "late", 2)}})
	start := time.Now()
	r.sendBody(mustMarshal(t, protocol.Request{ID: 1, Op: protocol.OpPush, Args: args, TimeoutMs: 200}))
	wantError(t, r.read(), 1, protocol.CodeDeadlineExceeded)
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("a 200 ms deadline answered after %v", took)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	res := mustPush(t, c, item(t, "q", "p", "late", 2))
	if *res[0].Offset != 1 {
		t.Fatalf("the retry: %+v", res[0])
	}
	checkGapless(t, storedMessages(t, ts.pool, "q", "p"), 2)
}

// nested is n one-element arrays around a nil: six bytes a level, a frame of
// a few megabytes nests millions of levels.
func nested(n int) msgpack.RawMessage {
	return append(bytes.Repeat([]byte{0x91}, n), 0xc0)
}

// A frame nesting millions of levels, wherever a value is read or skipped,
// is refused (or skipped) without taking the sidecar down: a recursive
// decoder would exhaust its stack and end the process.
func TestDeeplyNestedFramesAreRefusedNotFatal(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	r := dialRaw(t, ts.socket)
	deep := nested(6_000_000)
	okItem := map[string]any{"queue": "q", "payload": 1}
	// An unknown envelope key is skipped, as any unknown key: the call is served.
	r.sendBody(mustMarshal(t, map[string]any{"id": 1, "op": protocol.OpHealth, "future": deep}))
	if resp := r.read(); resp.ID != 1 || resp.Error != nil {
		t.Fatalf("health with a deep unknown envelope key: %+v", resp)
	}
	for i, args := range []map[string]any{
		{"items": []any{okItem}, "future": deep},                                                           // an unknown push argument
		{"queue": "q", "batch": deep},                                                                      // pop.batch
		{"items": []any{map[string]any{"leaseId": "x", "offset": 0, "error": deep}}},                       // an ack item's error
		{"items": []any{map[string]any{"queue": "q", "payload": 1, "headers": map[string]any{"h": deep}}}}, // a header's value
		{"protocol": deep}, // hello.protocol
		{"items": []any{map[string]any{"queue": "q", "payload": nested(protocol.MaxNesting)}}}, // a payload one level too deep
	} {
		id := uint64(10 + i)
		op := []string{protocol.OpPush, protocol.OpPop, protocol.OpAck, protocol.OpPush, protocol.OpHello, protocol.OpPush}[i]
		r.sendBody(mustMarshal(t, map[string]any{"id": id, "op": op, "args": args}))
		resp := r.read()
		wantError(t, resp, id, protocol.CodeBadRequest)
		if !strings.Contains(resp.Error.Message, "levels deep") {
			t.Fatalf("%s: %q does not say the nesting", op, resp.Error.Message)
		}
	}
	// The same connection, and any other, is still served; a payload within
	// the limit is stored and delivered as it was pushed.
	within := nested(protocol.MaxNesting - 4) // args, items, the item and the payload's own levels
	r.sendRequest(99, protocol.OpPush, map[string]any{"items": []any{map[string]any{"queue": "deep", "payload": within}}})
	if resp := r.read(); resp.ID != 99 || resp.Error != nil {
		t.Fatalf("a payload nested %d levels: %+v", protocol.MaxNesting-4, resp.Error)
	}
	res, err := ts.client(t).Pop(testContext(t), queenside.PopArgs{Queue: "deep", Batch: 1, AutoAck: true})
	if err != nil || len(res.Messages) != 1 || !bytes.Equal(res.Messages[0].Payload, within) {
		t.Fatalf("pop of the deep payload: %v, %d messages", err, len(res.Messages))
	}
	stillServes(t, ts)
}

// A timeoutMs above a day is invalid_argument, not a deadline already past
// (a retryable deadline_exceeded); a day itself is served.
func TestTimeoutAboveADayIsRefused(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	r := dialRaw(t, ts.socket)
	for i, ms := range []uint64{protocol.MaxTimeoutMs + 1, 10_000_000_000_000, 1<<64 - 1} {
		id := uint64(1 + i)
		r.sendBody(mustMarshal(t, protocol.Request{ID: id, Op: protocol.OpHealth, TimeoutMs: ms}))
		resp := r.read()
		wantError(t, resp, id, protocol.CodeInvalidArgument)
		if !strings.Contains(resp.Error.Message, "timeoutMs") {
			t.Fatalf("%d ms: %q", ms, resp.Error.Message)
		}
	}
	r.sendBody(mustMarshal(t, protocol.Request{ID: 9, Op: protocol.OpHealth, TimeoutMs: protocol.MaxTimeoutMs}))
	if resp := r.read(); resp.ID != 9 || resp.Error != nil {
		t.Fatalf("a day: %+v", resp.Error)
	}
}

// A frame whose body stops halfway closes its connection once
// FrameBodyTimeout has passed, and the memory frames in flight hold
// together is bounded: a frame waits for its share before its body is
// read, and gets it once the stalled ones are gone.
func TestHalfSentFramesAreBoundedAndTimedOut(t *testing.T) {
	const big = 1 << 20
	ts := startSidecar(t, "", Options{MaxFrameBytes: big, MaxFrameMemory: 2 * big, FrameBodyTimeout: 2 * time.Second})
	var stalled []*rawConn
	for range 2 { // the whole budget, announced and never filled
		r := dialRaw(t, ts.socket)
		r.write(append(lengthPrefix(big), bytes.Repeat([]byte{0x80}, big/2)...))
		stalled = append(stalled, r)
	}
	time.Sleep(200 * time.Millisecond) // both are read up to their stall
	start := time.Now()
	r := dialRaw(t, ts.socket)
	r.sendRequest(1, protocol.OpHealth, nil)
	resp := r.read()
	waited := time.Since(start)
	if resp.ID != 1 || resp.Error != nil {
		t.Fatalf("health after the stalled frames: %+v", resp)
	}
	if waited < time.Second {
		t.Fatalf("answered after %v: the budget did not hold the frame back until the stalled ones timed out", waited)
	}
	for _, s := range stalled {
		e := s.read()
		wantError(t, e, 0, protocol.CodeBadRequest)
		if !strings.Contains(e.Error.Message, "did not arrive within 2s") {
			t.Fatalf("stalled frame: %q", e.Error.Message)
		}
		s.closed()
	}
	stillServes(t, ts)
}

// A sidecar whose database role may not call the schema's functions (an
// operator revoked EXECUTE from PUBLIC and gave it none) says so: health
// is not ok and names the privileges it lacks, and a push fails
// permission_denied, not retryable, instead of a retryable internal error.
func TestARoleWithoutExecuteIsNotHealthy(t *testing.T) {
	owner := startSidecar(t, "", Options{}) // migrates the schema as its owner
	mustPush(t, owner.client(t), item(t, "q", "p", "t1", 1))
	for _, sql := range []string{
		"CREATE ROLE qs_reader LOGIN",
		"REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA queenside FROM PUBLIC",
	} {
		if _, err := owner.pool.Exec(testContext(t), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	t.Cleanup(func() {
		for _, sql := range []string{"DROP OWNED BY qs_reader", "DROP ROLE qs_reader"} {
			owner.pool.Exec(context.Background(), sql) //nolint:errcheck // the test database goes anyway
		}
	})
	u, err := url.Parse(owner.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User("qs_reader")
	st, err := store.Open(testContext(t), u.String(), testLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	srv := New(st, Options{Logger: testLogger()})
	srv.SetReady()
	socket := filepath.Join(shortTempDir(t), "qs.sock")
	ln, err := ListenSocket(socket, 0o660)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	defer srv.Close()

	h := srv.Health(testContext(t))
	if h.Status == protocol.HealthOK || h.Database.OK || !strings.Contains(h.Database.Error, "lacks EXECUTE on queenside.") ||
		!strings.Contains(h.Database.Error, "EXECUTE on queenside.push(bigint,") {
		t.Fatalf("health of a role that may not call the schema's functions: %s %+v", h.Status, h.Database)
	}
	res, err := dialClient(t, socket).Push(testContext(t), item(t, "q", "p", "t2", 2))
	var pe *protocol.Error
	if err == nil && len(res) == 1 {
		pe = res[0].Error
	} else {
		errors.As(err, &pe)
	}
	if pe == nil || pe.Code != protocol.CodePermissionDenied || pe.Retryable || !strings.Contains(pe.Message, "permission denied") {
		t.Fatalf("push as a role that may not call the schema's functions: %+v, %v, %v", res, pe, err)
	}
}
