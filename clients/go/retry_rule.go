package queenside

import "github.com/queenside/queenside/protocol"

// The rule of automatic retries, the same in the three clients (see
// clients/README.md, "Retries"): a call is sent again by itself only when
// sending it again cannot do harm.
//
//   - draining: the sidecar refused the request before serving it, so
//     nothing was done, whatever the operation.
//   - unavailable: the sidecar may have been half-way through it (a commit
//     whose answer was lost), so only a call that can be repeated without
//     changing more than the first would have is sent again: those listed
//     in idempotent. Pop, ack, renew, release, transaction, seek,
//     deleteGroup, dlqReplay, dlqDelete and maintenance changes are not.
//
// Any other answer, and a broken connection, is the caller's to handle.
func mayRetry(op string, args any, code protocol.Code) bool {
	switch code {
	case protocol.CodeDraining:
		return true
	case protocol.CodeUnavailable:
		ok := idempotent[op]
		return ok != nil && ok(args)
	}
	return false
}

// idempotent lists the operations a repeat cannot make do more, each with
// the condition on its arguments.
var idempotent = map[string]func(args any) bool{
	protocol.OpHello:     always,
	protocol.OpHealth:    always,
	protocol.OpConfigure: always, // it sets every option to what it is given
	protocol.OpQueues:    always,
	protocol.OpStats:     always,
	protocol.OpGroups:    always,
	protocol.OpDLQ:       always,
	// A repeat of an item with a transaction id is answered duplicate;
	// one the sidecar named itself would be stored twice.
	protocol.OpPush:        everyItemHasTransactionID,
	protocol.OpMaintenance: readsOnly,

	protocol.OpDLQSummary: always, // revision 1.2: it only counts
}

func always(any) bool { return true }

func everyItemHasTransactionID(args any) bool {
	var items []PushItem
	switch a := args.(type) {
	case protocol.PushArgs:
		items = a.Items
	case *protocol.PushArgs:
		items = a.Items
	default:
		return false // a shape this rule cannot read: not known to be safe
	}
	for _, it := range items {
		if it.TransactionID == "" {
			return false
		}
	}
	return true
}

// readsOnly: maintenance without arguments only reads the state.
func readsOnly(args any) bool {
	switch a := args.(type) {
	case nil:
		return true
	case map[string]bool:
		return len(a) == 0
	case map[string]any:
		return len(a) == 0
	case struct{}:
		return true
	}
	return false
}
