package protocol

import (
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// Limits of dlq and dlqReplay.
const (
	DefaultDLQLimit = 100
	MaxDLQLimit     = 1000
	MaxDLQReplayIDs = 1000
)

// DLQArgs lists dead letters of a queue, page by page (keyset on id).
type DLQArgs struct {
	Queue     string  `msgpack:"queue"`
	Group     *string `msgpack:"group,omitempty"`
	Partition *string `msgpack:"partition,omitempty"`
	Limit     int     `msgpack:"limit,omitempty"`
	AfterID   int64   `msgpack:"afterId,omitempty"`
}

// DLQEntry is one dead-lettered message: a copy, which outlives the
// original's retention. The Replay fields say as what it was last replayed.
type DLQEntry struct {
	ID                    int64              `msgpack:"id"`
	Queue                 string             `msgpack:"queue"`
	Partition             string             `msgpack:"partition"`
	Group                 string             `msgpack:"group"`
	Offset                int64              `msgpack:"offset"`
	MessageID             string             `msgpack:"messageId"`
	TransactionID         string             `msgpack:"transactionId"`
	Payload               msgpack.RawMessage `msgpack:"payload"`
	Error                 string             `msgpack:"error"`
	Failures              int                `msgpack:"failures"`
	CommittedAt           time.Time          `msgpack:"committedAt"`
	DeadAt                time.Time          `msgpack:"deadAt"`
	ReplayedAt            *time.Time         `msgpack:"replayedAt,omitempty"`
	ReplayedMessageID     string             `msgpack:"replayedMessageId,omitempty"`
	ReplayedTransactionID string             `msgpack:"replayedTransactionId,omitempty"`
	ReplayedOffset        *int64             `msgpack:"replayedOffset,omitempty"`
}

// DLQResult is one page of dead letters; NextAfterID is set when more follow.
type DLQResult struct {
	Entries     []DLQEntry `msgpack:"entries"`
	NextAfterID *int64     `msgpack:"nextAfterId,omitempty"`
}

// DLQReplayArgs names dead letters to push again.
type DLQReplayArgs struct {
	IDs []int64 `msgpack:"ids"`
}

// DLQReplayResult reports one replayed entry; Status and Error mean what
// they mean in push.
type DLQReplayResult struct {
	ID            int64      `msgpack:"id"`
	Status        string     `msgpack:"status"`
	MessageID     string     `msgpack:"messageId,omitempty"`
	TransactionID string     `msgpack:"transactionId,omitempty"`
	Offset        *int64     `msgpack:"offset,omitempty"`
	CommittedAt   *time.Time `msgpack:"committedAt,omitempty"`
	Error         *Error     `msgpack:"error,omitempty"`
}

// DLQReplayReply is the result of dlqReplay.
type DLQReplayReply struct {
	Results []DLQReplayResult `msgpack:"results"`
}

// DecodeDLQArgs reads dlq's arguments and fills in the default limit.
func DecodeDLQArgs(raw []byte) (DLQArgs, error) {
	a := DLQArgs{Limit: DefaultDLQLimit}
	err := walkMap(raw, "args", func(d *dec, key string) error {
		var err error
		var v int64
		switch key {
		case "queue":
			err = readQueue(d, &a.Queue)
		case "group":
			var g string
			if g, err = readString(d, key); err == nil && g != "" {
				err = CheckName(key, g)
			}
			a.Group = &g
		case "partition":
			var p string
			if p, err = readString(d, key); err == nil {
				err = CheckPartition(key, p)
			}
			a.Partition = &p
		case "limit":
			v, err = readInt(d, key, 1, MaxDLQLimit)
			a.Limit = int(v)
		case "afterId":
			a.AfterID, err = readInt(d, key, 0, 1<<62)
		default:
			err = skipField(d, key)
		}
		return err
	})
	if err == nil && a.Queue == "" {
		err = invalid("queue", "is required")
	}
	return a, err
}

// DecodeDLQReplayArgs reads dlqReplay's arguments.
func DecodeDLQReplayArgs(raw []byte) (DLQReplayArgs, error) {
	var a DLQReplayArgs
	err := walkMap(raw, "args", func(d *dec, key string) error {
		if key != "ids" {
			return skipField(d, key)
		}
		n, err := readArrayLen(d, key, MaxDLQReplayIDs)
		if err != nil {
			return err
		}
		a.IDs = make([]int64, n)
		for i := range a.IDs {
			if a.IDs[i], err = readInt(d, key, 1, 1<<62); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil && len(a.IDs) == 0 {
		err = invalid("ids", "must name at least one entry")
	}
	return a, err
}
