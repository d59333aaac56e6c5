package protocol

import "github.com/vmihailenco/msgpack/v5"

// The results sent most often are encoded by hand rather than by
// reflection: the same bytes (the golden frames check it), a fraction of the
// work. Keys are written in field order, and empty optional fields are left
// out exactly as the struct tags' omitempty would.

// EncodeMsgpack writes r as a map.
func (r PushResult) EncodeMsgpack(e *msgpack.Encoder) error {
	n := 5
	n += boolInt(r.MessageID != "") + boolInt(r.Offset != nil) + boolInt(!r.CommittedAt.IsZero()) + boolInt(r.Error != nil)
	w := fieldWriter{e: e}
	w.mapLen(n)
	w.int("index", int64(r.Index))
	w.str("status", r.Status)
	w.str("queue", r.Queue)
	w.str("partition", r.Partition)
	w.str("transactionId", r.TransactionID)
	if r.MessageID != "" {
		w.str("messageId", r.MessageID)
	}
	if r.Offset != nil {
		w.int("offset", *r.Offset)
	}
	if !r.CommittedAt.IsZero() {
		w.key("committedAt")
		w.err(e.EncodeTime(r.CommittedAt))
	}
	if r.Error != nil {
		w.key("error")
		w.err(e.Encode(r.Error))
	}
	return w.failed
}

// EncodeMsgpack writes m as a map; the payload goes out as stored.
func (m Message) EncodeMsgpack(e *msgpack.Encoder) error {
	n := 8 + boolInt(m.TraceID != "") + boolInt(len(m.Headers) > 0) + boolInt(m.LeaseID != "") + boolInt(m.Producer != "")
	w := fieldWriter{e: e}
	w.mapLen(n)
	w.str("queue", m.Queue)
	w.str("partition", m.Partition)
	w.int("offset", m.Offset)
	w.str("messageId", m.MessageID)
	w.str("transactionId", m.TransactionID)
	w.raw("payload", m.Payload)
	w.key("committedAt")
	w.err(e.EncodeTime(m.CommittedAt))
	if m.TraceID != "" {
		w.str("traceId", m.TraceID)
	}
	if len(m.Headers) > 0 {
		w.key("headers")
		w.err(e.Encode(m.Headers))
	}
	if m.LeaseID != "" {
		w.str("leaseId", m.LeaseID)
	}
	w.key("redelivered")
	w.err(e.EncodeBool(m.Redelivered))
	if m.Producer != "" {
		w.str("producer", m.Producer)
	}
	return w.failed
}

// EncodeMsgpack writes it as a map, as clients send it.
func (it PushItem) EncodeMsgpack(e *msgpack.Encoder) error {
	n := 2 + boolInt(it.Partition != "") + boolInt(it.TransactionID != "") + boolInt(it.TraceID != "") + boolInt(len(it.Headers) > 0)
	w := fieldWriter{e: e}
	w.mapLen(n)
	w.str("queue", it.Queue)
	if it.Partition != "" {
		w.str("partition", it.Partition)
	}
	w.raw("payload", it.Payload)
	if it.TransactionID != "" {
		w.str("transactionId", it.TransactionID)
	}
	if it.TraceID != "" {
		w.str("traceId", it.TraceID)
	}
	if len(it.Headers) > 0 {
		w.key("headers")
		w.err(e.Encode(it.Headers))
	}
	return w.failed
}

// EncodeMsgpack writes r as a map: its messages, then its leases.
func (r PopResult) EncodeMsgpack(e *msgpack.Encoder) error {
	w := fieldWriter{e: e}
	if r.Paused {
		w.mapLen(3)
		w.key("paused")
		w.err(e.EncodeBool(true))
	} else {
		w.mapLen(2)
	}
	w.key("messages")
	if w.arrayLen(len(r.Messages), r.Messages == nil) {
		for i := range r.Messages {
			w.err(r.Messages[i].EncodeMsgpack(e))
		}
	}
	w.key("leases")
	if w.arrayLen(len(r.Leases), r.Leases == nil) {
		for i := range r.Leases {
			w.err(r.Leases[i].EncodeMsgpack(e))
		}
	}
	return w.failed
}

// EncodeMsgpack writes l as a map.
func (l Lease) EncodeMsgpack(e *msgpack.Encoder) error {
	w := fieldWriter{e: e}
	w.mapLen(8)
	w.str("leaseId", l.LeaseID)
	w.str("queue", l.Queue)
	w.str("partition", l.Partition)
	w.str("group", l.Group)
	w.int("fromOffset", l.FromOffset)
	w.int("toOffset", l.ToOffset)
	w.key("expiresAt")
	w.err(e.EncodeTime(l.ExpiresAt))
	w.int("headAttempts", int64(l.HeadAttempts))
	return w.failed
}

// EncodeMsgpack writes r as a map: its items' results, its leases, and
// the result of the pop it carried, if any.
func (r AckResult) EncodeMsgpack(e *msgpack.Encoder) error {
	w := fieldWriter{e: e}
	w.mapLen(2 + boolInt(r.Pop != nil) + boolInt(r.PopError != nil))
	w.key("results")
	if w.arrayLen(len(r.Results), r.Results == nil) {
		for _, it := range r.Results {
			w.mapLen(2 + boolInt(it.Code != "") + boolInt(it.DeadLettered))
			w.int("index", int64(it.Index))
			w.bool("success", it.Success)
			if it.Code != "" {
				w.str("code", it.Code)
			}
			if it.DeadLettered {
				w.bool("deadLettered", true)
			}
		}
	}
	w.key("leases")
	if w.arrayLen(len(r.Leases), r.Leases == nil) {
		for _, l := range r.Leases {
			w.mapLen(3)
			w.str("leaseId", l.LeaseID)
			w.bool("released", l.Released)
			w.int("cursor", l.Cursor)
		}
	}
	if r.Pop != nil {
		w.key("pop")
		w.err(r.Pop.EncodeMsgpack(e))
	}
	if r.PopError != nil {
		w.key("popError")
		w.err(e.Encode(r.PopError))
	}
	return w.failed
}

// fieldWriter writes map entries and keeps the first error.
type fieldWriter struct {
	e      *msgpack.Encoder
	failed error
}

func (w *fieldWriter) err(err error) {
	if w.failed == nil {
		w.failed = err
	}
}

func (w *fieldWriter) mapLen(n int) { w.err(w.e.EncodeMapLen(n)) }
func (w *fieldWriter) key(k string) { w.err(w.e.EncodeString(k)) }

func (w *fieldWriter) str(k, v string) {
	w.key(k)
	w.err(w.e.EncodeString(v))
}

// raw writes an encoded value as it is; nil is msgpack's nil, as
// reflection writes a nil RawMessage.
func (w *fieldWriter) raw(k string, v msgpack.RawMessage) {
	w.key(k)
	if v == nil {
		w.err(w.e.EncodeNil())
		return
	}
	w.err(v.EncodeMsgpack(w.e))
}

func (w *fieldWriter) bool(k string, v bool) {
	w.key(k)
	w.err(w.e.EncodeBool(v))
}

// arrayLen starts an array of n elements and reports whether they follow:
// a nil slice is msgpack's nil, as reflection writes it.
func (w *fieldWriter) arrayLen(n int, isNil bool) bool {
	if isNil {
		w.err(w.e.EncodeNil())
		return false
	}
	w.err(w.e.EncodeArrayLen(n))
	return true
}

func (w *fieldWriter) int(k string, v int64) {
	w.key(k)
	w.err(w.e.EncodeInt(v))
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
