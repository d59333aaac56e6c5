package protocol

import (
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// Subscription modes: where a new group starts.
const (
	SubscribeAll  = "all"  // the oldest retained message
	SubscribeNew  = "new"  // messages committed after the group's first pop
	SubscribeFrom = "from" // the first message committed at or after subscriptionFrom
)

// Limits of pop.
const (
	MaxPopBatch      = 10000
	MaxPopPartitions = 100
	MaxWaitMs        = 60000
	MaxLeaseSeconds  = 86400
)

// PopArgs asks for messages of a queue for a group (queue mode when Group
// is empty).
type PopArgs struct {
	Queue            string     `msgpack:"queue"`
	Partition        string     `msgpack:"partition,omitempty"`
	Group            string     `msgpack:"group,omitempty"`
	Batch            int        `msgpack:"batch,omitempty"`
	Partitions       int        `msgpack:"partitions,omitempty"`
	WaitMs           int        `msgpack:"waitMs,omitempty"`
	AutoAck          bool       `msgpack:"autoAck,omitempty"`
	LeaseSeconds     int        `msgpack:"leaseSeconds,omitempty"`
	SubscriptionMode string     `msgpack:"subscriptionMode,omitempty"`
	SubscriptionFrom *time.Time `msgpack:"subscriptionFrom,omitempty"`
}

// Message is one delivered message.
type Message struct {
	Queue         string             `msgpack:"queue"`
	Partition     string             `msgpack:"partition"`
	Offset        int64              `msgpack:"offset"`
	MessageID     string             `msgpack:"messageId"`
	TransactionID string             `msgpack:"transactionId"`
	Payload       msgpack.RawMessage `msgpack:"payload"`
	CommittedAt   time.Time          `msgpack:"committedAt"`
	TraceID       string             `msgpack:"traceId,omitempty"`
	Headers       map[string]string  `msgpack:"headers,omitempty"`
	LeaseID       string             `msgpack:"leaseId,omitempty"`
	Redelivered   bool               `msgpack:"redelivered"`
	// Producer is the PostgreSQL role that pushed the message, stamped by
	// PostgreSQL (revision 1.4); empty for messages stored before.
	Producer string `msgpack:"producer,omitempty"`
}

// Lease is a group's claim on a span of one partition. HeadAttempts counts
// the deliveries of FromOffset to the group, this one included.
type Lease struct {
	LeaseID      string    `msgpack:"leaseId"`
	Queue        string    `msgpack:"queue"`
	Partition    string    `msgpack:"partition"`
	Group        string    `msgpack:"group"`
	FromOffset   int64     `msgpack:"fromOffset"`
	ToOffset     int64     `msgpack:"toOffset"`
	ExpiresAt    time.Time `msgpack:"expiresAt"`
	HeadAttempts int       `msgpack:"headAttempts"`
}

// PopResult is the result of pop.
type PopResult struct {
	Messages []Message `msgpack:"messages"`
	Leases   []Lease   `msgpack:"leases"`
	// Paused is set when nothing was delivered because consumption is
	// paused: the queue's, or the whole cluster's by maintenance.
	Paused bool `msgpack:"paused,omitempty"`
}

// DecodePopArgs reads pop's arguments and fills in the defaults.
func DecodePopArgs(raw []byte) (PopArgs, error) {
	a := PopArgs{Batch: 1, Partitions: 1, SubscriptionMode: SubscribeAll}
	err := walkMap(raw, "args", func(d *dec, key string) error {
		var err error
		var v int64
		switch key {
		case "queue":
			return readQueue(d, &a.Queue)
		case "partition":
			if a.Partition, err = readString(d, key); err == nil {
				err = CheckPartition(key, a.Partition)
			}
		case "group":
			if a.Group, err = readString(d, key); err == nil && a.Group != "" {
				err = CheckName(key, a.Group)
			}
		case "batch":
			v, err = readInt(d, key, 1, MaxPopBatch)
			a.Batch = int(v)
		case "partitions":
			v, err = readInt(d, key, 1, MaxPopPartitions)
			a.Partitions = int(v)
		case "waitMs":
			v, err = readInt(d, key, 0, MaxWaitMs)
			a.WaitMs = int(v)
		case "autoAck":
			a.AutoAck, err = readBool(d, key)
		case "leaseSeconds":
			v, err = readInt(d, key, 1, MaxLeaseSeconds)
			a.LeaseSeconds = int(v)
		case "subscriptionMode":
			if a.SubscriptionMode, err = readString(d, key); err == nil {
				switch a.SubscriptionMode {
				case SubscribeAll, SubscribeNew, SubscribeFrom:
				default:
					err = invalid(key, "%q: want all, new or from", a.SubscriptionMode)
				}
			}
		case "subscriptionFrom":
			var t time.Time
			if t, err = readTime(d, key); err == nil {
				a.SubscriptionFrom = &t
			}
		default:
			err = skipField(d, key)
		}
		return err
	})
	switch {
	case err != nil:
	case a.Queue == "":
		err = invalid("queue", "is required")
	case a.SubscriptionMode == SubscribeFrom && a.SubscriptionFrom == nil:
		err = invalid("subscriptionFrom", "is required with subscriptionMode from")
	}
	return a, err
}
