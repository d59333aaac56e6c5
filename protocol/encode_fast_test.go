package protocol

import (
	"bytes"
	"reflect"
	"testing"
	"time"
)

// Types without the hand-written encoders: msgpack encodes them by
// reflection from the same struct tags.
type (
	reflectedPushResult PushResult
	reflectedMessage    Message
)

func TestHandWrittenEncodersMatchReflection(t *testing.T) {
	at := time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.UTC)
	off := int64(1 << 40)
	results := []PushResult{
		{Index: 0, Status: StatusQueued, Queue: "q", Partition: "p", TransactionID: "t", MessageID: "m", Offset: &off, CommittedAt: at},
		{Index: 300, Status: StatusFailed, Queue: "", Partition: "Default", Error: Errorf(CodeInvalidArgument, "queue: is required")},
		{Index: 7, Status: StatusBuffered, Queue: "q", Partition: "p", TransactionID: "t", MessageID: "m"},
	}
	for i, r := range results {
		fast, slow := mustRaw(t, r), mustRaw(t, reflectedPushResult(r))
		if !bytes.Equal(fast, slow) {
			t.Fatalf("push result %d:\nhand %x\nrefl %x", i, fast, slow)
		}
	}
	messages := []Message{
		{Queue: "q", Partition: "p", Offset: 0, MessageID: "m", TransactionID: "t", Payload: mustRaw(t, nil), CommittedAt: at},
		{Queue: "orders", Partition: "eu", Offset: 1 << 33, MessageID: "m", TransactionID: "t", Payload: mustRaw(t, map[string]int{"a": 1}),
			CommittedAt: at, TraceID: "trace", Headers: map[string]string{"k": "v"}, LeaseID: "1.2.abc", Redelivered: true},
	}
	for i, m := range messages {
		fast, slow := mustRaw(t, m), mustRaw(t, reflectedMessage(m))
		if !bytes.Equal(fast, slow) {
			t.Fatalf("message %d:\nhand %x\nrefl %x", i, fast, slow)
		}
	}
}

type (
	reflectedPopResult struct {
		Messages []Message        `msgpack:"messages"`
		Leases   []reflectedLease `msgpack:"leases"`
	}
	reflectedLease     Lease
	reflectedAckResult AckResult
)

func TestHandWrittenResultEncodersMatchReflection(t *testing.T) {
	at := time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.UTC)
	leases := []Lease{{LeaseID: "1.2.abc", Queue: "q", Partition: "p", Group: "g", FromOffset: 0, ToOffset: 1 << 35,
		ExpiresAt: at, HeadAttempts: 1000}}
	pops := []PopResult{
		{},
		{Messages: []Message{}, Leases: []Lease{}},
		{Messages: []Message{{Queue: "q", Partition: "p", Payload: mustRaw(t, 1), CommittedAt: at, LeaseID: "1.2.abc"}}, Leases: leases},
	}
	for i, r := range pops {
		var ls []reflectedLease
		for _, l := range r.Leases {
			ls = append(ls, reflectedLease(l))
		}
		if r.Leases != nil && ls == nil {
			ls = []reflectedLease{}
		}
		fast, slow := mustRaw(t, r), mustRaw(t, reflectedPopResult{Messages: r.Messages, Leases: ls})
		if !bytes.Equal(fast, slow) {
			t.Fatalf("pop result %d:\nhand %x\nrefl %x", i, fast, slow)
		}
	}
	acks := []AckResult{
		{},
		{Results: []AckItemResult{}, Leases: []LeaseState{}},
		{Results: []AckItemResult{{Index: 0, Success: true}, {Index: 300, Code: ItemLeaseExpired}, {Index: 2, Success: true, DeadLettered: true}},
			Leases: []LeaseState{{LeaseID: "1.2.abc", Released: true, Cursor: 1 << 40}, {LeaseID: "x", Cursor: -1}}},
	}
	for i, r := range acks {
		fast, slow := mustRaw(t, r), mustRaw(t, reflectedAckResult(r))
		if !bytes.Equal(fast, slow) {
			t.Fatalf("ack result %d:\nhand %x\nrefl %x", i, fast, slow)
		}
	}
}

type reflectedPushItem PushItem

func TestHandWrittenPushItemEncoderMatchesReflection(t *testing.T) {
	items := []PushItem{
		{Queue: "q", Payload: mustRaw(t, 1)},
		{Queue: "orders", Partition: "eu", Payload: mustRaw(t, map[string]any{"a": []int{1, 2}}), TransactionID: "t-1",
			TraceID: "trace", Headers: map[string]string{"k": "v"}, Invalid: Errorf(CodeInvalidArgument, "not sent")},
		{Queue: "", Partition: "p", Payload: nil, Headers: map[string]string{}},
	}
	for i, it := range items {
		fast, slow := mustRaw(t, it), mustRaw(t, reflectedPushItem(it))
		if !bytes.Equal(fast, slow) {
			t.Fatalf("push item %d:\nhand %x\nrefl %x", i, fast, slow)
		}
	}
}

// The hand-written decoders read what reflection reads: every field, keys
// in any order, unknown keys skipped, nil as the zero value.
func TestHandWrittenDecodersMatchReflection(t *testing.T) {
	at := time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.UTC)
	off := int64(1 << 40)
	results := [][]byte{
		mustRaw(t, PushResult{Index: 3, Status: StatusQueued, Queue: "q", Partition: "p", TransactionID: "t", MessageID: "m", Offset: &off, CommittedAt: at}),
		mustRaw(t, PushResult{Index: 300, Status: StatusFailed, Partition: "Default", Error: Errorf(CodeInvalidArgument, "queue: is required")}),
		mustRaw(t, map[string]any{"extra": []any{1, "x", map[string]any{"y": nil}}, "offset": nil,
			"error": nil, "status": "duplicate", "index": 1, "messageId": nil}),
		mustRaw(t, nil),
	}
	for i, raw := range results {
		var fast PushResult
		var slow reflectedPushResult
		errFast, errSlow := Unmarshal(raw, &fast), Unmarshal(raw, &slow)
		if (errFast == nil) != (errSlow == nil) || !reflect.DeepEqual(fast, PushResult(slow)) {
			t.Fatalf("push result %d:\nhand %+v (%v)\nrefl %+v (%v)", i, fast, errFast, slow, errSlow)
		}
	}
	messages := [][]byte{
		mustRaw(t, Message{Queue: "q", Partition: "p", Offset: 5, MessageID: "m", TransactionID: "t", Payload: mustRaw(t, "x"), CommittedAt: at}),
		mustRaw(t, Message{Queue: "orders", Partition: "eu", Offset: 1 << 33, MessageID: "m", TransactionID: "t",
			Payload: mustRaw(t, map[string]int{"a": 1}), CommittedAt: at, TraceID: "trace", Headers: map[string]string{"k": "v"},
			LeaseID: "1.2.abc", Redelivered: true}),
		mustRaw(t, map[string]any{"payload": "x", "unknown": 1.5, "headers": nil, "redelivered": nil, "offset": -2}),
	}
	for i, raw := range messages {
		var fast Message
		var slow reflectedMessage
		errFast, errSlow := Unmarshal(raw, &fast), Unmarshal(raw, &slow)
		if (errFast == nil) != (errSlow == nil) || !reflect.DeepEqual(fast, Message(slow)) {
			t.Fatalf("message %d:\nhand %+v (%v)\nrefl %+v (%v)", i, fast, errFast, slow, errSlow)
		}
	}
	// A payload that is msgpack's nil comes back as its encoding, byte for
	// byte (reflection would leave it empty, which decodes as nothing).
	var m Message
	if err := Unmarshal(mustRaw(t, Message{Payload: mustRaw(t, nil)}), &m); err != nil || !bytes.Equal(m.Payload, []byte{0xc0}) {
		t.Fatalf("nil payload came back as %x, %v", m.Payload, err)
	}
	// A nil time (which reflection cannot read into a time.Time) is zero.
	var r PushResult
	if err := Unmarshal(mustRaw(t, map[string]any{"committedAt": nil, "index": 2}), &r); err != nil || !r.CommittedAt.IsZero() || r.Index != 2 {
		t.Fatalf("nil committedAt: %+v, %v", r, err)
	}
	// Malformed input is an error, never a panic.
	for _, raw := range [][]byte{{0x81}, {0x81, 0xa5, 'i', 'n', 'd', 'e', 'x'}, {0x92, 0x01, 0x02}, {0x81, 0x01, 0x02}} {
		var r PushResult
		var m Message
		if Unmarshal(raw, &r) == nil || Unmarshal(raw, &m) == nil {
			t.Fatalf("%x decoded without an error", raw)
		}
	}
	if Unmarshal([]byte{0x81, 0xa5, 'i', 'n', 'd', 'e', 'x', 0xa1, 'x'}, &r) == nil {
		t.Fatal("a string index decoded without an error")
	}
}
