package protocol

import (
	"fmt"
	"time"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// The answers a client reads most often are decoded by hand rather than by
// reflection, with the same outcome (a test compares the two): keys in any
// order, unknown keys skipped, nil read as the zero value.

// DecodeMsgpack reads a push result.
func (r *PushResult) DecodeMsgpack(d *msgpack.Decoder) error {
	*r = PushResult{}
	return decodeFields(d, "push result", func(key string) error {
		var err error
		switch key {
		case "index":
			r.Index, err = d.DecodeInt()
		case "status":
			r.Status, err = d.DecodeString()
		case "queue":
			r.Queue, err = d.DecodeString()
		case "partition":
			r.Partition, err = d.DecodeString()
		case "transactionId":
			r.TransactionID, err = d.DecodeString()
		case "messageId":
			r.MessageID, err = d.DecodeString()
		case "offset":
			r.Offset, err = decodeOptionalInt(d)
		case "committedAt":
			r.CommittedAt, err = decodeTimeOrNil(d)
		case "error":
			err = d.Decode(&r.Error)
		default:
			err = d.Skip()
		}
		return err
	})
}

// DecodeMsgpack reads a delivered message; its payload is kept as encoded.
func (m *Message) DecodeMsgpack(d *msgpack.Decoder) error {
	*m = Message{}
	return decodeFields(d, "message", func(key string) error {
		var err error
		switch key {
		case "queue":
			m.Queue, err = d.DecodeString()
		case "partition":
			m.Partition, err = d.DecodeString()
		case "offset":
			m.Offset, err = d.DecodeInt64()
		case "messageId":
			m.MessageID, err = d.DecodeString()
		case "transactionId":
			m.TransactionID, err = d.DecodeString()
		case "payload":
			m.Payload, err = d.DecodeRaw()
		case "committedAt":
			m.CommittedAt, err = decodeTimeOrNil(d)
		case "traceId":
			m.TraceID, err = d.DecodeString()
		case "headers":
			err = d.Decode(&m.Headers)
		case "leaseId":
			m.LeaseID, err = d.DecodeString()
		case "redelivered":
			m.Redelivered, err = d.DecodeBool()
		case "producer":
			m.Producer, err = d.DecodeString()
		default:
			err = d.Skip()
		}
		return err
	})
}

// decodeFields reads a map (or nil, which leaves the value zero), calling
// field for each key with the decoder positioned on its value.
func decodeFields(d *msgpack.Decoder, what string, field func(key string) error) error {
	if c, err := d.PeekCode(); err != nil {
		return err
	} else if c == msgpcode.Nil {
		return d.DecodeNil()
	}
	n, err := d.DecodeMapLen()
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	for i := 0; i < n; i++ {
		key, err := d.DecodeString()
		if err != nil {
			return fmt.Errorf("%s: key: %w", what, err)
		}
		if err := field(key); err != nil {
			return fmt.Errorf("%s: %s: %w", what, key, err)
		}
	}
	return nil
}

func decodeOptionalInt(d *msgpack.Decoder) (*int64, error) {
	if c, err := d.PeekCode(); err != nil {
		return nil, err
	} else if c == msgpcode.Nil {
		return nil, d.DecodeNil()
	}
	v, err := d.DecodeInt64()
	return &v, err
}

func decodeTimeOrNil(d *msgpack.Decoder) (t0 time.Time, err error) {
	if c, err := d.PeekCode(); err != nil {
		return t0, err
	} else if c == msgpcode.Nil {
		return t0, d.DecodeNil()
	}
	return d.DecodeTime()
}
