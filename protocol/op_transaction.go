package protocol

import "github.com/vmihailenco/msgpack/v5"

// TransactionArgs are acks and pushes to commit together, or not at all.
type TransactionArgs struct {
	Acks   []AckItem  `msgpack:"acks"`
	Pushes []PushItem `msgpack:"pushes"`
}

// TransactionResult is the result of a transaction that committed.
type TransactionResult struct {
	Acks   []AckItemResult `msgpack:"acks"`
	Pushes []PushResult    `msgpack:"pushes"`
}

// DecodeTransactionArgs reads a transaction's arguments. Unlike a push, a
// malformed push item fails the whole call: a transaction is all or nothing.
func DecodeTransactionArgs(raw []byte) (TransactionArgs, error) {
	var a TransactionArgs
	err := walkMap(raw, "args", func(d *dec, key string) error {
		switch key {
		case "acks":
			n, err := readArrayLen(d, key, MaxAckItems)
			if err != nil {
				return err
			}
			a.Acks = make([]AckItem, n)
			for i := range a.Acks {
				if err := decodeAckItem(d, &a.Acks[i]); err != nil {
					return err
				}
			}
		case "pushes":
			n, err := readArrayLen(d, key, MaxPushItems)
			if err != nil {
				return err
			}
			a.Pushes = make([]PushItem, 0, n)
			var itemDec dec
			itemDec.Decoder = msgpack.NewDecoder(&itemDec.r)
			for i := 0; i < n; i++ {
				itemRaw, err := d.raw()
				if err != nil {
					return invalid(key, "malformed item %d", i)
				}
				it := decodePushItem(&itemDec, itemRaw)
				if it.Invalid != nil {
					return invalid(key, "item %d: %s", i, it.Invalid.Message)
				}
				a.Pushes = append(a.Pushes, it)
			}
		default:
			return skipField(d, key)
		}
		return nil
	})
	if err == nil && len(a.Acks) == 0 && len(a.Pushes) == 0 {
		err = invalid("args", "a transaction needs acks or pushes")
	}
	return a, err
}
