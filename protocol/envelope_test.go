package protocol

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestDecodeRequest(t *testing.T) {
	body, _ := Marshal(Request{ID: 9, Op: OpPush, Args: mustRaw(t, map[string]any{"items": []any{}}), TimeoutMs: 250})
	req, err := DecodeRequest(body)
	if err != nil {
		t.Fatal(err)
	}
	if req.ID != 9 || req.Op != OpPush || req.TimeoutMs != 250 || len(req.Args) == 0 {
		t.Fatalf("decoded %+v", req)
	}
}

func TestDecodeRequestIgnoresUnknownKeysAndNilArgs(t *testing.T) {
	body, _ := Marshal(map[string]any{"id": 1, "op": "health", "args": nil, "future": []int{1, 2}})
	req, err := DecodeRequest(body)
	if err != nil || req.Args != nil {
		t.Fatalf("decoded %+v, %v", req, err)
	}
}

func TestDecodeRequestErrorsKeepTheID(t *testing.T) {
	for _, v := range []map[string]any{
		{"id": 5, "op": 1},
		{"id": 5, "args": "x", "op": "push"},
		{"id": 5, "op": "push", "timeoutMs": -1},
		{"id": 5},
	} {
		body, _ := Marshal(v)
		req, err := DecodeRequest(body)
		if err == nil || err.Code != CodeBadRequest || req.ID != 5 {
			t.Fatalf("%v: id %d, error %v; want bad_request with id 5", v, req.ID, err)
		}
	}
}

func TestPushItemValidation(t *testing.T) {
	good := map[string]any{"queue": "q", "payload": nil}
	raw := mustRaw(t, map[string]any{"items": []any{
		good,
		map[string]any{"queue": "q"},
		map[string]any{"queue": "q", "payload": 1, "traceId": strings.Repeat("t", MaxTraceIDBytes+1)},
		map[string]any{"queue": "q", "payload": 1, "headers": map[string]any{"a": "b"}},
	}})
	args, err := DecodePushArgs(raw)
	if err != nil {
		t.Fatal(err)
	}
	if args.Items[0].Invalid != nil || string(args.Items[0].Payload) != "\xc0" || args.Items[0].Partition != DefaultPartition {
		t.Fatalf("a nil payload is a value: %+v", args.Items[0])
	}
	if args.Items[1].Invalid == nil || args.Items[2].Invalid == nil {
		t.Fatal("missing payload or long trace id accepted")
	}
	if args.Items[3].Invalid != nil || args.Items[3].Headers["a"] != "b" {
		t.Fatalf("headers: %+v", args.Items[3])
	}
}

func TestReadTimeAcceptsThreeForms(t *testing.T) {
	want := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, v := range []any{want, "2026-01-02T03:04:05Z", want.UnixMilli()} {
		raw := mustRaw(t, map[string]any{"at": v})
		var got time.Time
		err := walkMap(raw, "args", func(d *dec, key string) error {
			var err error
			got, err = readTime(d, key)
			return err
		})
		if err != nil || !got.Equal(want) {
			t.Fatalf("%T %v: got %v, %v", v, v, got, err)
		}
	}
}

func TestCodesRetryable(t *testing.T) {
	retry := map[Code]bool{CodeUnavailable: true, CodeSpoolFull: true, CodeDraining: true,
		CodeOverloaded: true, CodeDeadlineExceeded: true, CodeInternal: true}
	// 15 in version 1, key_missing in revision 1.1, permission_denied in
	// 1.3, forbidden in 1.4.
	if len(Codes()) != 18 || Codes()[15] != CodeKeyMissing || Codes()[16] != CodePermissionDenied || Codes()[17] != CodeForbidden {
		t.Fatalf("%d codes, the contract has 18 (key_missing, permission_denied, then forbidden, last)", len(Codes()))
	}
	for _, c := range Codes() {
		if c.Retryable() != retry[c] || Errorf(c, "x").Retryable != retry[c] {
			t.Fatalf("%s retryable=%t", c, c.Retryable())
		}
	}
}

func mustRaw(t testing.TB, v any) []byte {
	t.Helper()
	b, err := Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestAppendRequestMatchesTheEnvelope(t *testing.T) {
	for _, c := range []struct {
		args    any
		timeout uint64
	}{
		{nil, 0},
		{PushArgs{Items: []PushItem{{Queue: "q", Payload: mustRaw(t, 1), TransactionID: "t"}}}, 0},
		{PopArgs{Queue: "q", Batch: 10}, 30000},
		{map[string]any{"queue": "q"}, 30000}, // one key: a map's order is random
		{[]int(nil), 1},
	} {
		want := mustRaw(t, Request{ID: 1 << 40, Op: OpPop, TimeoutMs: c.timeout})
		if c.args != nil {
			want = mustRaw(t, Request{ID: 1 << 40, Op: OpPop, Args: mustRaw(t, c.args), TimeoutMs: c.timeout})
		}
		got, err := AppendRequest([]byte{0xff}, 1<<40, OpPop, c.args, c.timeout)
		if err != nil || !bytes.Equal(got[1:], want) || got[0] != 0xff {
			t.Fatalf("args %#v timeout %d:\ngot  %x (%v)\nwant ff%x", c.args, c.timeout, got, err, want)
		}
	}
}

// DecodeResponse reads what Unmarshal reads, every golden answer and
// notice among them, with Result pointing into the body.
func TestDecodeResponseAgreesWithUnmarshal(t *testing.T) {
	var bodies [][]byte
	paths, _ := filepath.Glob(filepath.Join("testdata", "golden", "*.bin"))
	for _, p := range paths {
		if b, err := os.ReadFile(p); err == nil && !strings.Contains(p, "request_") {
			bodies = append(bodies, b[FrameHeaderSize:])
		}
	}
	for _, v := range []any{
		map[string]any{"id": 3, "result": nil},
		map[string]any{"id": uint64(1) << 63, "result": map[string]any{"a": []any{1, "x"}}, "future": []any{1, 2}},
		map[string]any{"id": 0, "notice": "draining"},
		map[string]any{"id": 9, "error": map[string]any{"code": "unavailable", "message": "m", "retryable": true}},
	} {
		b, err := Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, b)
	}
	if len(bodies) < 8 {
		t.Fatalf("%d bodies: the golden answers are missing", len(bodies))
	}
	for i, b := range bodies {
		var want Response
		if err := Unmarshal(b, &want); err != nil {
			t.Fatalf("body %d: %v", i, err)
		}
		own := bytes.Clone(b)
		got, err := DecodeResponse(own)
		if err != nil || got.ID != want.ID || got.Notice != want.Notice || !bytes.Equal(got.Result, want.Result) ||
			!reflect.DeepEqual(got.Error, want.Error) {
			t.Fatalf("body %d: %+v, %v; want %+v", i, got, err, want)
		}
		if len(got.Result) > 0 {
			got.Result[0] ^= 0xff // in the body itself, unless Result is a copy
			if bytes.Equal(own, b) {
				t.Fatalf("body %d: Result is a copy", i)
			}
		}
	}
	one, _ := Marshal(map[string]any{"id": 1})
	for _, bad := range [][]byte{{0x91, 0x01}, {0x81, 0xa2, 'i', 'd'}, append(one, 0x01)} {
		if _, err := DecodeResponse(bad); err == nil {
			t.Fatalf("% x: no error", bad)
		}
	}
}
