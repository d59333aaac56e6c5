package buffer

import (
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/queenside/queenside/sidecar/store"
)

// record is one spooled push item: everything the push path needs to store
// it later exactly as it would have been stored now, with the identity it
// was given when first received.
type record struct {
	Queue         string    `msgpack:"q"`
	Partition     string    `msgpack:"p"`
	Payload       []byte    `msgpack:"b"`
	TransactionID string    `msgpack:"t"`
	MessageID     []byte    `msgpack:"m"`
	TraceID       string    `msgpack:"r,omitempty"`
	Headers       []byte    `msgpack:"h,omitempty"`
	ReceivedAt    time.Time `msgpack:"a"`
}

func encodeRecord(m store.Message, at time.Time) ([]byte, error) {
	return msgpack.Marshal(record{
		Queue: m.Queue, Partition: m.Partition, Payload: m.Payload,
		TransactionID: m.TransactionID, MessageID: m.MessageID[:],
		TraceID: m.TraceID, Headers: m.Headers, ReceivedAt: at,
	})
}

func decodeRecord(data []byte) (store.Message, error) {
	var r record
	if err := msgpack.Unmarshal(data, &r); err != nil {
		return store.Message{}, fmt.Errorf("spooled record: %w", err)
	}
	mid, err := uuid.FromBytes(r.MessageID)
	if err != nil {
		return store.Message{}, fmt.Errorf("spooled record: message id: %w", err)
	}
	if r.Queue == "" || r.TransactionID == "" {
		return store.Message{}, fmt.Errorf("spooled record: no queue or transaction id")
	}
	return store.Message{
		Queue: r.Queue, Partition: r.Partition, Payload: r.Payload,
		TransactionID: r.TransactionID, MessageID: mid,
		TraceID: r.TraceID, Headers: r.Headers,
	}, nil
}
