package protocol

import (
	"bytes"
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
