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
	// Revision 1.2: the rest of a filter (DLQFilter), and Count, which
	// asks for how many entries the filter matches.
	ErrorContains string     `msgpack:"errorContains,omitempty"`
	DeadFrom      *time.Time `msgpack:"deadFrom,omitempty"`
	DeadTo        *time.Time `msgpack:"deadTo,omitempty"`
	Count         bool       `msgpack:"count,omitempty"`
}

// Filter is the filter a listing applies.
func (a DLQArgs) Filter() DLQFilter {
	return DLQFilter{Queue: a.Queue, Group: a.Group, Partition: a.Partition,
		ErrorContains: a.ErrorContains, DeadFrom: a.DeadFrom, DeadTo: a.DeadTo}
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
	Producer              string             `msgpack:"producer,omitempty"` // revision 1.4; see Message
}

// DLQResult is one page of dead letters; NextAfterID is set when more follow.
type DLQResult struct {
	Entries     []DLQEntry `msgpack:"entries"`
	NextAfterID *int64     `msgpack:"nextAfterId,omitempty"`
	// With count (revision 1.2): how many entries the filter matches, and
	// how many of them were replayed already.
	Count         *int64 `msgpack:"count,omitempty"`
	ReplayedCount *int64 `msgpack:"replayedCount,omitempty"`
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

// DecodeDLQArgs reads dlq's arguments and fills in the default limit.
func DecodeDLQArgs(raw []byte) (DLQArgs, error) {
	a := DLQArgs{Limit: DefaultDLQLimit}
	var f DLQFilter
	err := walkMap(raw, "args", func(d *dec, key string) error {
		var err error
		var v int64
		switch key {
		case "limit":
			v, err = readInt(d, key, 1, MaxDLQLimit)
			a.Limit = int(v)
		case "afterId":
			a.AfterID, err = readInt(d, key, 0, 1<<62)
		case "count":
			a.Count, err = readBool(d, key)
		default:
			err = f.readKey(d, key)
		}
		return err
	})
	if err == nil {
		err = f.check()
	}
	a.Queue, a.Group, a.Partition = f.Queue, f.Group, f.Partition
	a.ErrorContains, a.DeadFrom, a.DeadTo = f.ErrorContains, f.DeadFrom, f.DeadTo
	return a, err
}
