package protocol

import (
	"time"
	"unicode/utf8"
)

// Ack item statuses.
const (
	AckCompleted = "completed"
	AckFailed    = "failed"
)

// Per-item codes of ack, renew and release (besides unavailable).
const (
	ItemLeaseExpired = string(CodeLeaseExpired)
	// ItemAlreadyAcked: the lease has ended and the group's cursor has
	// already passed the message, so an earlier ack settled it (revision
	// 1.2; lease_expired before).
	ItemAlreadyAcked = "already_acked"
	ItemNotInLease   = "not_in_lease"
	ItemUnresolvable = "unresolvable"
	ItemRewound      = "rewound"
)

// ItemCode is a per-item code of ack, renew and release, and what it
// means in words, for error messages and logs.
type ItemCode struct{ Code, Text string }

// ItemCodes lists every per-item code with its words. The Python and Node
// clients' tables are generated from it (protocol/internal/clientgen).
func ItemCodes() []ItemCode {
	return []ItemCode{
		{ItemAlreadyAcked, "already acknowledged"},
		{ItemLeaseExpired, "lease expired"},
		{ItemNotInLease, "not in the lease"},
		{ItemUnresolvable, "transaction id not found"},
		{ItemRewound, "rewound"},
		{string(CodeUnavailable), "database unavailable"},
	}
}

// ItemCodeText says a per-item code in words: "already acknowledged" for
// ItemAlreadyAcked. A code it does not know is returned as it is.
func ItemCodeText(code string) string {
	for _, c := range ItemCodes() {
		if c.Code == code {
			return c.Text
		}
	}
	return code
}

// Limits of ack, renew and release.
const (
	MaxAckItems    = 10000
	MaxErrorBytes  = 4096
	MaxLeaseIDs    = 1000
	DefaultAckMode = AckCompleted
)

// AckItem names one message of a lease by Offset or by TransactionID.
type AckItem struct {
	LeaseID       string `msgpack:"leaseId"`
	Offset        *int64 `msgpack:"offset,omitempty"`
	TransactionID string `msgpack:"transactionId,omitempty"`
	Status        string `msgpack:"status,omitempty"`
	Error         string `msgpack:"error,omitempty"`
}

// AckArgs carries the items of one ack call, and, from revision 1.2, the
// consumer's next pop: served in the same transaction, so that a consumer's
// cycle costs one round trip and one commit.
type AckArgs struct {
	Items []AckItem `msgpack:"items"`
	Pop   *PopArgs  `msgpack:"pop,omitempty"`
}

// AckItemResult reports one item. Success means the transaction that moved
// the cursor, or recorded the failure, committed.
type AckItemResult struct {
	Index        int    `msgpack:"index"`
	Success      bool   `msgpack:"success"`
	Code         string `msgpack:"code,omitempty"`
	DeadLettered bool   `msgpack:"deadLettered,omitempty"`
}

// LeaseState is where a lease named by an ack call stands afterwards.
type LeaseState struct {
	LeaseID  string `msgpack:"leaseId"`
	Released bool   `msgpack:"released"`
	Cursor   int64  `msgpack:"cursor"`
}

// AckResult is the result of ack. Pop is the result of the pop the call
// carried (revision 1.2); absent when it carried none, and from a sidecar
// of revision 1.1, which ignores the argument.
type AckResult struct {
	Results []AckItemResult `msgpack:"results"`
	Leases  []LeaseState    `msgpack:"leases"`
	Pop     *PopResult      `msgpack:"pop,omitempty"`
	// PopError is why the pop the call carried failed once the acks were
	// applied; Pop is then empty.
	PopError *Error `msgpack:"popError,omitempty"`
}

// LeaseIDsArgs names leases (release; renew adds Seconds).
type LeaseIDsArgs struct {
	LeaseIDs []string `msgpack:"leaseIds"`
	Seconds  int      `msgpack:"seconds,omitempty"`
}

// LeaseResult reports one lease of renew or release.
type LeaseResult struct {
	LeaseID   string     `msgpack:"leaseId"`
	Success   bool       `msgpack:"success"`
	ExpiresAt *time.Time `msgpack:"expiresAt,omitempty"`
	Code      string     `msgpack:"code,omitempty"`
}

// LeaseResults is the result of renew and release.
type LeaseResults struct {
	Results []LeaseResult `msgpack:"results"`
}

// DecodeAckArgs reads ack's arguments. Unlike push, any malformed item
// fails the whole call: acks move cursors, and half of a call is not what
// the caller asked for.
func DecodeAckArgs(raw []byte) (AckArgs, error) {
	var a AckArgs
	err := walkMap(raw, "args", func(d *dec, key string) error {
		if key == "pop" {
			sub, err := d.raw()
			if err != nil {
				return invalid(key, "malformed value")
			}
			p, err := DecodePopArgs(sub)
			if err != nil {
				return prefixed(key, err)
			}
			a.Pop = &p
			return nil
		}
		if key != "items" {
			return skipField(d, key)
		}
		n, err := readArrayLen(d, key, MaxAckItems)
		if err != nil {
			return err
		}
		a.Items = make([]AckItem, n)
		for i := range a.Items {
			if err := decodeAckItem(d, &a.Items[i]); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil && len(a.Items) == 0 {
		err = invalid("items", "must hold at least one item")
	}
	return a, err
}

func decodeAckItem(d *dec, it *AckItem) error {
	it.Status = DefaultAckMode
	err := walkMapFrom(d, "item", func(d *dec, key string) error {
		var err error
		switch key {
		case "leaseId":
			it.LeaseID, err = readString(d, key)
		case "offset":
			var v int64
			if v, err = readInt(d, key, 0, 1<<62); err == nil {
				it.Offset = &v
			}
		case "transactionId":
			if it.TransactionID, err = readString(d, key); err == nil {
				err = CheckTransactionID(key, it.TransactionID)
			}
		case "status":
			if it.Status, err = readString(d, key); err == nil && it.Status != AckCompleted && it.Status != AckFailed {
				err = invalid(key, "%q: want completed or failed", it.Status)
			}
		case "error":
			if it.Error, err = readString(d, key); err == nil {
				err = CheckText(key, it.Error)
				it.Error = truncateUTF8(it.Error, MaxErrorBytes)
			}
		default:
			err = skipField(d, key)
		}
		return err
	})
	switch {
	case err != nil:
		return err
	case it.LeaseID == "":
		return invalid("leaseId", "is required")
	case (it.Offset == nil) == (it.TransactionID == ""):
		return invalid("item", "name the message by exactly one of offset and transactionId")
	}
	return nil
}

// DecodeLeaseIDsArgs reads renew's and release's arguments.
func DecodeLeaseIDsArgs(raw []byte) (LeaseIDsArgs, error) {
	var a LeaseIDsArgs
	err := walkMap(raw, "args", func(d *dec, key string) error {
		switch key {
		case "leaseIds":
			n, err := readArrayLen(d, key, MaxLeaseIDs)
			if err != nil {
				return err
			}
			a.LeaseIDs = make([]string, n)
			for i := range a.LeaseIDs {
				if a.LeaseIDs[i], err = readString(d, key); err != nil {
					return err
				}
			}
			return nil
		case "seconds":
			v, err := readInt(d, key, 1, MaxLeaseSeconds)
			a.Seconds = int(v)
			return err
		}
		return skipField(d, key)
	})
	if err == nil && len(a.LeaseIDs) == 0 {
		err = invalid("leaseIds", "must name at least one lease")
	}
	return a, err
}

// truncateUTF8 cuts s to at most n bytes without splitting a character.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
