package protocol

import "time"

// Bulk dead-letter actions (revision 1.2): a filter that dlq, dlqReplay and
// dlqDelete share, batches with a cursor, and dlqSummary.

// Batches of dlqReplay and dlqDelete by filter.
const (
	DefaultDLQBatch   = 500
	DefaultDLQSummary = 100
	MaxDLQSummary     = 1000
	// StatusSkipped is a dlqReplay result of an entry replayed already,
	// left alone because includeReplayed was false.
	StatusSkipped = "skipped"
)

// DLQFilter selects a queue's dead letters. ErrorContains matches a
// substring of the error, case-sensitively; DeadFrom is inclusive and
// DeadTo exclusive.
type DLQFilter struct {
	Queue         string     `msgpack:"queue,omitempty"`
	Group         *string    `msgpack:"group,omitempty"`
	Partition     *string    `msgpack:"partition,omitempty"`
	ErrorContains string     `msgpack:"errorContains,omitempty"`
	DeadFrom      *time.Time `msgpack:"deadFrom,omitempty"`
	DeadTo        *time.Time `msgpack:"deadTo,omitempty"`
}

// readKey reads one of the filter's keys, and skips any other.
func (f *DLQFilter) readKey(d *dec, key string) error {
	var err error
	switch key {
	case "queue":
		err = readQueue(d, &f.Queue)
	case "group":
		var g string
		if g, err = readString(d, key); err == nil && g != "" {
			err = CheckName(key, g)
		}
		f.Group = &g
	case "partition":
		var p string
		if p, err = readString(d, key); err == nil {
			err = CheckPartition(key, p)
		}
		f.Partition = &p
	case "errorContains":
		if f.ErrorContains, err = readString(d, key); err == nil {
			err = CheckText(key, f.ErrorContains)
		}
	case "deadFrom", "deadTo":
		var t time.Time
		if t, err = readTime(d, key); err == nil {
			if key == "deadFrom" {
				f.DeadFrom = &t
			} else {
				f.DeadTo = &t
			}
		}
	default:
		err = skipField(d, key)
	}
	return err
}

func (f *DLQFilter) check() error {
	if f.Queue == "" {
		return invalid("queue", "is required")
	}
	if f.DeadFrom != nil && f.DeadTo != nil && !f.DeadFrom.Before(*f.DeadTo) {
		return invalid("deadTo", "must be after deadFrom")
	}
	return nil
}

// DLQSelection names dead letters by id, or by a filter a batch at a
// time: AfterID is where a batch starts (the previous batch's NextAfterID)
// and Limit how many entries it looks at.
type DLQSelection struct {
	IDs []int64 `msgpack:"ids,omitempty"`
	DLQFilter
	AfterID int64 `msgpack:"afterId,omitempty"`
	Limit   int   `msgpack:"limit,omitempty"`
}

// ByFilter says whether the selection is a filter rather than ids.
func (s DLQSelection) ByFilter() bool { return len(s.IDs) == 0 }

// DLQReplayArgs names dead letters to push again. IncludeReplayed nil
// means true with ids (each named entry is replayed, as in revision 1.1)
// and false with a filter.
type DLQReplayArgs struct {
	DLQSelection
	IncludeReplayed *bool `msgpack:"includeReplayed,omitempty"`
}

// ReplaysReplayed says whether entries replayed already are replayed again.
func (a DLQReplayArgs) ReplaysReplayed() bool {
	if a.IncludeReplayed != nil {
		return *a.IncludeReplayed
	}
	return !a.ByFilter()
}

// DLQReplayReply is the result of dlqReplay: one result an entry looked
// at, their counts by outcome (revision 1.2), and with a filter, where the
// next batch starts when more may follow.
type DLQReplayReply struct {
	Results     []DLQReplayResult `msgpack:"results"`
	Replayed    int               `msgpack:"replayed"`
	Skipped     int               `msgpack:"skipped"`
	Failed      int               `msgpack:"failed"`
	NextAfterID *int64            `msgpack:"nextAfterId,omitempty"`
}

// DLQDeleteReply is the result of dlqDelete.
type DLQDeleteReply struct {
	Deleted     int    `msgpack:"deleted"`
	NextAfterID *int64 `msgpack:"nextAfterId,omitempty"`
}

// DLQSummaryArgs asks for a queue's dead letters (every queue's without
// one) counted by group and error.
type DLQSummaryArgs struct {
	Queue string `msgpack:"queue,omitempty"`
	Limit int    `msgpack:"limit,omitempty"`
}

// DLQErrorCount is how many dead letters of a queue's group died of one
// error, how many of them were replayed, and when the first and the last
// died.
type DLQErrorCount struct {
	Queue       string    `msgpack:"queue"`
	Group       string    `msgpack:"group"`
	Error       string    `msgpack:"error"`
	Count       int64     `msgpack:"count"`
	Replayed    int64     `msgpack:"replayed"`
	FirstDeadAt time.Time `msgpack:"firstDeadAt"`
	LastDeadAt  time.Time `msgpack:"lastDeadAt"`
}

// DLQSummaryResult lists the most frequent errors first.
type DLQSummaryResult struct {
	Errors []DLQErrorCount `msgpack:"errors"`
}

// DecodeDLQReplayArgs reads dlqReplay's arguments.
func DecodeDLQReplayArgs(raw []byte) (DLQReplayArgs, error) {
	var a DLQReplayArgs
	sel, err := decodeDLQSelection(raw, func(d *dec, key string) (bool, error) {
		if key != "includeReplayed" {
			return false, nil
		}
		v, err := readBool(d, key)
		a.IncludeReplayed = &v
		return true, err
	})
	a.DLQSelection = sel
	return a, err
}

// DecodeDLQDeleteArgs reads dlqDelete's arguments.
func DecodeDLQDeleteArgs(raw []byte) (DLQSelection, error) {
	return decodeDLQSelection(raw, func(*dec, string) (bool, error) { return false, nil })
}

// decodeDLQSelection reads ids or a filter, with afterId and limit; other
// is offered each key first, and says whether it was its own.
func decodeDLQSelection(raw []byte, other func(d *dec, key string) (bool, error)) (DLQSelection, error) {
	a := DLQSelection{Limit: DefaultDLQBatch}
	err := walkMap(raw, "args", func(d *dec, key string) error {
		if mine, err := other(d, key); mine || err != nil {
			return err
		}
		var err error
		var v int64
		switch key {
		case "ids":
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
		case "limit":
			v, err = readInt(d, key, 1, MaxDLQReplayIDs)
			a.Limit = int(v)
		case "afterId":
			a.AfterID, err = readInt(d, key, 0, 1<<62)
		default:
			err = a.readKey(d, key)
		}
		return err
	})
	if err != nil {
		return a, err
	}
	switch {
	case len(a.IDs) > 0 && a.Queue != "":
		return a, invalid("ids", "name entries by ids or by a filter (queue, ...), not both")
	case len(a.IDs) == 0 && a.Queue == "":
		return a, invalid("ids", "must name at least one entry, or give a filter with queue")
	case len(a.IDs) == 0:
		return a, a.check()
	}
	return a, nil
}

// DecodeDLQSummaryArgs reads dlqSummary's arguments.
func DecodeDLQSummaryArgs(raw []byte) (DLQSummaryArgs, error) {
	a := DLQSummaryArgs{Limit: DefaultDLQSummary}
	err := walkMap(raw, "args", func(d *dec, key string) error {
		switch key {
		case "queue":
			return readQueue(d, &a.Queue)
		case "limit":
			v, err := readInt(d, key, 1, MaxDLQSummary)
			a.Limit = int(v)
			return err
		}
		return skipField(d, key)
	})
	return a, err
}
