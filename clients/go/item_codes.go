package queenside

import (
	"fmt"

	"github.com/queenside/queenside/protocol"
)

// ItemCodeText says what a per-item code of ack, renew or release
// (AckItemResult.Code, LeaseResult.Code) means, in the words the Python and
// Node clients use too: "already acknowledged" for
// protocol.ItemAlreadyAcked, "lease expired" for protocol.ItemLeaseExpired...
// A code it does not know is returned as it is.
func ItemCodeText(code string) string { return protocol.ItemCodeText(code) }

// describeAckItem says "ack item 3 (offset 7): lease expired
// (lease_expired)" of the item at index 3 of an ack call.
func describeAckItem(index int, it AckItem, code string) string {
	what := ""
	switch {
	case it.Offset != nil:
		what = fmt.Sprintf(" (offset %d)", *it.Offset)
	case it.TransactionID != "":
		what = fmt.Sprintf(" (transaction %q)", it.TransactionID)
	}
	return fmt.Sprintf("ack item %d%s: %s (%s)", index, what, ItemCodeText(code), code)
}
