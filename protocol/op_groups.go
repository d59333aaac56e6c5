package protocol

import (
	"time"

	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// Where seek moves a cursor.
const (
	SeekBeginning = "beginning" // the first retained message
	SeekEnd       = "end"       // past the last message
	SeekTime      = "time"      // the first message committed at or after a time
)

// GroupsArgs lists the groups of one queue, or of every queue.
type GroupsArgs struct {
	Queue string `msgpack:"queue,omitempty"`
}

// GroupInfo is one group of a queue. Lag counts the messages its cursors
// have not passed yet; OldestUnackedAt is the commit time of the oldest.
type GroupInfo struct {
	Queue            string     `msgpack:"queue"`
	Group            string     `msgpack:"group"`
	Lag              int64      `msgpack:"lag"`
	LeasedPartitions int        `msgpack:"leasedPartitions"`
	OldestUnackedAt  *time.Time `msgpack:"oldestUnackedAt,omitempty"`
}

// GroupsResult is the result of groups.
type GroupsResult struct {
	Groups []GroupInfo `msgpack:"groups"`
}

// SeekArgs moves a group's cursor in one partition, or in all of them.
// To is SeekBeginning, SeekEnd or SeekTime; At is set with SeekTime.
type SeekArgs struct {
	Queue     string
	Group     string
	Partition *string
	To        string
	At        time.Time
}

// CursorPosition is where seek left a partition's cursor.
type CursorPosition struct {
	Partition string `msgpack:"partition"`
	Cursor    int64  `msgpack:"cursor"`
}

// SeekResult is the result of seek.
type SeekResult struct {
	Cursors []CursorPosition `msgpack:"cursors"`
}

// GroupArgs names one group of one queue (deleteGroup).
type GroupArgs struct {
	Queue string `msgpack:"queue"`
	Group string `msgpack:"group"`
}

// DeleteGroupResult is the result of deleteGroup.
type DeleteGroupResult struct {
	Deleted bool `msgpack:"deleted"`
}

// DecodeGroupsArgs reads groups' arguments.
func DecodeGroupsArgs(raw []byte) (GroupsArgs, error) {
	var a GroupsArgs
	err := walkMap(raw, "args", func(d *dec, key string) error {
		if key == "queue" {
			return readQueue(d, &a.Queue)
		}
		return skipField(d, key)
	})
	return a, err
}

// DecodeSeekArgs reads seek's arguments. `to` is "beginning", "end" or a
// time (a timestamp, an RFC 3339 string or epoch milliseconds).
func DecodeSeekArgs(raw []byte) (SeekArgs, error) {
	var a SeekArgs
	err := walkMap(raw, "args", func(d *dec, key string) error {
		var err error
		switch key {
		case "queue":
			err = readQueue(d, &a.Queue)
		case "group":
			if a.Group, err = readString(d, key); err == nil && a.Group != "" {
				err = CheckName(key, a.Group)
			}
		case "partition":
			var p string
			if p, err = readString(d, key); err == nil {
				err = CheckPartition(key, p)
				a.Partition = &p
			}
		case "to":
			a.To, a.At, err = readSeekTarget(d)
		default:
			err = skipField(d, key)
		}
		return err
	})
	switch {
	case err != nil:
	case a.Queue == "":
		err = invalid("queue", "is required")
	case a.To == "":
		err = invalid("to", "is required: beginning, end or a time")
	}
	return a, err
}

func readSeekTarget(d *dec) (string, time.Time, error) {
	if c, _ := d.PeekCode(); msgpcode.IsString(c) {
		s, err := readString(d, "to")
		if err != nil {
			return "", time.Time{}, err
		}
		switch s {
		case SeekBeginning, SeekEnd:
			return s, time.Time{}, nil
		}
		t, perr := time.Parse(time.RFC3339Nano, s)
		if perr != nil {
			return "", time.Time{}, invalid("to", "%q: want beginning, end or a time", s)
		}
		return SeekTime, t, nil
	}
	t, err := readTime(d, "to")
	return SeekTime, t, err
}

// DecodeGroupArgs reads arguments that name a queue and a group.
func DecodeGroupArgs(raw []byte) (GroupArgs, error) {
	var a GroupArgs
	err := walkMap(raw, "args", func(d *dec, key string) error {
		var err error
		switch key {
		case "queue":
			err = readQueue(d, &a.Queue)
		case "group":
			if a.Group, err = readString(d, key); err == nil && a.Group != "" {
				err = CheckName(key, a.Group)
			}
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
