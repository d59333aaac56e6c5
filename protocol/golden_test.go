package protocol

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

var update = flag.Bool("update", false, "rewrite the golden frames in testdata/golden")

// goldenCase is one frame every client must decode and re-encode to the
// same bytes. value is the Go shape the frame was written from.
type goldenCase struct {
	name  string
	kind  string // "request", "response" or "notice"
	value any
}

var committedAt = time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.UTC)

func offset(v int64) *int64 { return &v }

func goldenCases(t testing.TB) []goldenCase {
	raw := func(v any) msgpack.RawMessage { return mustRaw(t, v) }
	return []goldenCase{
		{"request_hello", "request", Request{ID: 1, Op: OpHello, Args: raw(HelloArgs{Protocol: 1, Client: "golden/1"})}},
		{"request_push", "request", Request{ID: 2, Op: OpPush, TimeoutMs: 5000, Args: raw(PushArgs{Items: []PushItem{
			{Queue: "orders", Partition: "eu-1", Payload: raw([]any{"sku-1", 2, true, nil, 1.5}),
				TransactionID: "order-1001", TraceID: "trace-1", Headers: map[string]string{"source": "web"}},
			{Queue: "orders", Payload: raw("plain text payload, 32+ bytes long")},
		}})}},
		{"response_push", "response", Response{ID: 2, Result: raw(PushReply{Results: []PushResult{
			{Index: 0, Status: StatusQueued, Queue: "orders", Partition: "eu-1", TransactionID: "order-1001",
				MessageID: "019ad4a0-7c00-7000-8000-000000000001", Offset: offset(0), CommittedAt: committedAt},
			{Index: 1, Status: StatusDuplicate, Queue: "orders", Partition: "Default", TransactionID: "order-1001",
				MessageID: "019ad4a0-7c00-7000-8000-000000000001", Offset: offset(300), CommittedAt: committedAt.Add(-time.Second).Truncate(time.Second)},
			{Index: 2, Status: StatusFailed, Queue: "", Partition: "Default", TransactionID: "",
				Error: Errorf(CodeInvalidArgument, "queue: is required")},
		}})}},
		{"request_configure", "request", Request{ID: 3, Op: OpConfigure, Args: raw(ConfigureArgs{Queue: "orders", Options: DefaultQueueOptions()})}},
		{"response_stats", "response", Response{ID: 4, Result: raw(StatsResult{Queue: "orders", Partitions: []PartitionStats{
			{Partition: "eu-1", HeadOffset: 70000, Messages: 65536, Groups: []GroupStats{{Group: "billing", Cursor: 65000, Lag: 5000, Leased: true}}},
		}})}},
		{"response_pop", "response", Response{ID: 7, Result: raw(PopResult{
			Messages: []Message{
				{Queue: "orders", Partition: "eu-1", Offset: 41, MessageID: "019ad4a0-7c00-7000-8000-000000000002",
					TransactionID: "order-1002", Payload: raw([]any{"sku-2", 1}), CommittedAt: committedAt,
					TraceID: "trace-2", Headers: map[string]string{"source": "web"},
					LeaseID: "3.17.5f0c6a8e4f2b4c1d9a7e3b2c1d0e9f8a", Redelivered: true},
				{Queue: "orders", Partition: "eu-1", Offset: 42, MessageID: "019ad4a0-7c00-7000-8000-000000000003",
					TransactionID: "order-1003", Payload: raw("plain"), CommittedAt: committedAt,
					LeaseID: "3.17.5f0c6a8e4f2b4c1d9a7e3b2c1d0e9f8a"},
			},
			Leases: []Lease{{LeaseID: "3.17.5f0c6a8e4f2b4c1d9a7e3b2c1d0e9f8a", Queue: "orders", Partition: "eu-1",
				Group: "billing", FromOffset: 41, ToOffset: 42, ExpiresAt: committedAt.Add(time.Minute).Truncate(time.Second), HeadAttempts: 2}},
		})}},
		{"response_error", "response", Response{ID: 5, Error: &Error{Code: CodeInvalidArgument, Message: "items: must hold at least one item",
			Details: map[string]any{"field": "items"}}}},
		{"response_error_retryable", "response", Response{ID: 6, Error: Errorf(CodeUnavailable, "database unavailable")}},
		{"notice_draining", "notice", Response{ID: 0, Notice: NoticeDraining}},
	}
}

type goldenManifest struct {
	Comment string            `json:"comment"`
	Frames  []goldenFrameInfo `json:"frames"`
}

type goldenFrameInfo struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	File string `json:"file"`
}

// TestGoldenFrames checks that the Go encoding of each case is byte for
// byte the committed frame, and that decoding the frame and encoding it
// again gives the same bytes. The Python and Node clients run the same
// check on the same files.
func TestGoldenFrames(t *testing.T) {
	dir := filepath.Join("testdata", "golden")
	var manifest goldenManifest
	manifest.Comment = "Frames (4-byte big-endian length + msgpack body) that every queenside client decodes and re-encodes byte for byte."
	for _, gc := range goldenCases(t) {
		body := mustRaw(t, gc.value)
		frame := AppendFrame(nil, body)
		file := gc.name + ".bin"
		manifest.Frames = append(manifest.Frames, goldenFrameInfo{Name: gc.name, Kind: gc.kind, File: file})
		path := filepath.Join(dir, file)
		if *update {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, frame, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%s: %v (run go test ./protocol -run Golden -update)", gc.name, err)
		}
		if !bytes.Equal(frame, want) {
			t.Fatalf("%s: encoding changed\n got %x\nwant %x", gc.name, frame, want)
		}
		got, err := ReadFrame(bytes.NewReader(want), nil, DefaultMaxFrameBytes)
		if err != nil {
			t.Fatal(err)
		}
		decoded := reflect.New(reflect.TypeOf(gc.value))
		if err := Unmarshal(got, decoded.Interface()); err != nil {
			t.Fatalf("%s: decode: %v", gc.name, err)
		}
		again := mustRaw(t, decoded.Elem().Interface())
		if !bytes.Equal(again, body) {
			t.Fatalf("%s: decode and re-encode changed the bytes\n got %x\nwant %x", gc.name, again, body)
		}
		if gc.kind == "request" {
			if _, perr := DecodeRequest(got); perr != nil {
				t.Fatalf("%s: the server's decoder refuses it: %v", gc.name, perr)
			}
		}
	}
	mpath := filepath.Join(dir, "manifest.json")
	if *update {
		b, _ := json.MarshalIndent(manifest, "", "  ")
		if err := os.WriteFile(mpath, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var onDisk goldenManifest
	b, err := os.ReadFile(mpath)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &onDisk); err != nil || !reflect.DeepEqual(onDisk, manifest) {
		t.Fatalf("manifest.json is stale (%v); run with -update", err)
	}
}
