package protocol

import (
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// Push item statuses.
const (
	StatusQueued    = "queued"
	StatusDuplicate = "duplicate"
	StatusBuffered  = "buffered"
	StatusFailed    = "failed"
)

// PushArgs carries the items of one push.
type PushArgs struct {
	Items []PushItem `msgpack:"items"`
}

// PushItem is one message to store. Payload is the exact msgpack encoding
// of the value, stored and returned byte for byte.
type PushItem struct {
	Queue         string             `msgpack:"queue"`
	Partition     string             `msgpack:"partition,omitempty"`
	Payload       msgpack.RawMessage `msgpack:"payload"`
	TransactionID string             `msgpack:"transactionId,omitempty"`
	TraceID       string             `msgpack:"traceId,omitempty"`
	Headers       map[string]string  `msgpack:"headers,omitempty"`

	// Invalid is set by DecodePushArgs when this item alone is malformed;
	// it fails with this error while the other items proceed.
	Invalid *Error `msgpack:"-"`
}

// PushResult reports the outcome of one item, in input order.
type PushResult struct {
	Index         int       `msgpack:"index"`
	Status        string    `msgpack:"status"`
	Queue         string    `msgpack:"queue"`
	Partition     string    `msgpack:"partition"`
	TransactionID string    `msgpack:"transactionId"`
	MessageID     string    `msgpack:"messageId,omitempty"`
	Offset        *int64    `msgpack:"offset,omitempty"`
	CommittedAt   time.Time `msgpack:"committedAt,omitempty"`
	Error         *Error    `msgpack:"error,omitempty"`
}

// PushReply is the result of push.
type PushReply struct {
	Results []PushResult `msgpack:"results"`
}

// DecodePushArgs reads push's arguments. A malformed item does not fail the
// call: it comes back with Invalid set. A missing or empty items list does.
func DecodePushArgs(raw []byte) (PushArgs, error) {
	var a PushArgs
	seen := false
	err := walkMap(raw, "args", func(d *dec, key string) error {
		if key != "items" {
			return skipField(d, key)
		}
		n, err := readArrayLen(d, key, MaxPushItems)
		if err != nil {
			return err
		}
		seen = true
		a.Items = make([]PushItem, 0, min(n, len(raw)))
		var itemDec dec
		itemDec.Decoder = msgpack.NewDecoder(&itemDec.r)
		for i := 0; i < n; i++ {
			itemRaw, err := d.raw()
			if err != nil {
				return invalid(key, "malformed item %d", i)
			}
			a.Items = append(a.Items, decodePushItem(&itemDec, itemRaw))
		}
		return nil
	})
	if err != nil {
		return a, err
	}
	if !seen || len(a.Items) == 0 {
		return a, invalid("items", "must hold at least one item")
	}
	return a, nil
}

// decodePushItem reads one push item with the decoder x; problems are
// reported in Invalid.
func decodePushItem(x *dec, raw []byte) PushItem {
	var it PushItem
	seenPayload := false
	err := walkMapWith(x, raw, "item", func(d *dec, key string) error {
		var err error
		switch key {
		case "queue":
			if it.Queue, err = readString(d, key); err == nil {
				err = CheckName(key, it.Queue)
			}
		case "partition":
			if it.Partition, err = readString(d, key); err == nil {
				err = CheckPartition(key, it.Partition)
			}
		case "payload":
			if it.Payload, err = d.raw(); err != nil {
				return invalid(key, "malformed value")
			}
			seenPayload = true
		case "transactionId":
			if it.TransactionID, err = readString(d, key); err == nil {
				err = CheckTransactionID(key, it.TransactionID)
			}
		case "traceId":
			if it.TraceID, err = readString(d, key); err == nil && len(it.TraceID) > MaxTraceIDBytes {
				err = invalid(key, "longer than %d bytes", MaxTraceIDBytes)
			} else if err == nil {
				err = CheckText(key, it.TraceID)
			}
		case "headers":
			it.Headers, err = readStringMap(d, key, MaxHeaders)
		default:
			err = skipField(d, key)
		}
		return err
	})
	switch {
	case err != nil:
	case it.Queue == "":
		err = invalid("queue", "is required")
	case !seenPayload:
		err = invalid("payload", "is required")
	}
	if it.Partition == "" {
		it.Partition = DefaultPartition
	}
	if err != nil {
		it.Invalid = err.(*Error)
	}
	return it
}
