package buffer

import (
	"bytes"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/queenside/queenside/sidecar/store"
)

func TestRecordKeepsEverythingThePushPathNeeds(t *testing.T) {
	m := store.Message{
		Queue: "q", Partition: "p", Payload: []byte{0xa3, 'a', 'b', 'c'},
		TransactionID: "tx-1", MessageID: uuid.Must(uuid.NewV7()),
		TraceID: "trace", Headers: []byte{0x81, 0xa1, 'k', 0xa1, 'v'},
	}
	data, err := encodeRecord(m, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeRecord(data)
	if err != nil {
		t.Fatal(err)
	}
	if got.Queue != m.Queue || got.Partition != m.Partition || !bytes.Equal(got.Payload, m.Payload) ||
		got.TransactionID != m.TransactionID || got.MessageID != m.MessageID || got.TraceID != m.TraceID ||
		!bytes.Equal(got.Headers, m.Headers) {
		t.Fatalf("round trip changed the message:\n got %+v\nwant %+v", got, m)
	}
	if _, err := decodeRecord([]byte{0xc1}); err == nil {
		t.Fatal("a record that is not msgpack decoded")
	}
	if _, err := decodeRecord(mustEncode(t, store.Message{Queue: "q", MessageID: m.MessageID})); err == nil {
		t.Fatal("a record without a transaction id decoded")
	}
}

func mustEncode(t *testing.T, m store.Message) []byte {
	t.Helper()
	data, err := encodeRecord(m, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestPendingHoldsAPartitionUntilItsLastRecord(t *testing.T) {
	p := newPending()
	a, b := partitionKey{"q", "a"}, partitionKey{"q", "b"}
	p.add([]partitionKey{a, a, b}, 1)
	if !p.holds("q", "a") || !p.holds("q", "b") || p.holds("q", "c") {
		t.Fatal("wrong partitions held")
	}
	p.add([]partitionKey{a, b}, -1)
	if !p.holds("q", "a") || p.holds("q", "b") {
		t.Fatal("a has one record left and b none")
	}
	p.add([]partitionKey{a}, -1)
	if p.holds("q", "a") || len(p.queues()) != 0 {
		t.Fatal("nothing should be held")
	}
}
