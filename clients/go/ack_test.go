package queenside_test

import (
	"context"
	"strings"
	"testing"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
)

func TestAckMessagesCompletesWhatPopReturned(t *testing.T) {
	c := dial(t, startSidecar(t))
	ctx := context.Background()
	pushMany(t, c, "acked", 3)
	res, err := c.Pop(ctx, queenside.PopArgs{Queue: "acked", Batch: 3})
	if err != nil || len(res.Messages) != 3 {
		t.Fatalf("pop: %d messages, %v", len(res.Messages), err)
	}
	ack, err := c.AckMessages(ctx, res.Messages...)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range ack.Results {
		if !r.Success {
			t.Fatalf("ack results %+v", ack.Results)
		}
	}
	if len(ack.Leases) != 1 || !ack.Leases[0].Released || ack.Leases[0].Cursor != 3 {
		t.Fatalf("leases %+v, want the lease released at cursor 3", ack.Leases)
	}
}

func TestHelpersCompleteAndFailOneMessageEach(t *testing.T) {
	c := dial(t, startSidecar(t))
	ctx := context.Background()
	pushMany(t, c, "mixed", 2)
	res, err := c.Pop(ctx, queenside.PopArgs{Queue: "mixed", Batch: 2})
	if err != nil || len(res.Messages) != 2 {
		t.Fatalf("pop: %+v, %v", res, err)
	}
	m0, m1 := res.Messages[0], res.Messages[1]
	ack, err := c.Ack(ctx, m0.Completed(), m1.Failed("bad input"))
	if err != nil || !ack.Results[0].Success || !ack.Results[1].Success {
		t.Fatalf("ack: %+v, %v", ack, err)
	}
	// The failure rewound to offset 1: it comes again.
	again, err := c.Pop(ctx, queenside.PopArgs{Queue: "mixed", Batch: 2})
	if err != nil || len(again.Messages) != 1 || again.Messages[0].Offset != 1 || !again.Messages[0].Redelivered {
		t.Fatalf("after the failure: %+v, %v", again.Messages, err)
	}
}

// The items go on the wire as {leaseId, offset, status[, error]}: a popped
// message also carries its transactionId, and an item naming both is refused.
func TestHelpersBuildTheWireItems(t *testing.T) {
	m := queenside.Message{Queue: "q", Partition: "p", Offset: 7, LeaseID: "l1", TransactionID: "t7", MessageID: "m7"}
	done := m.Completed()
	if done.LeaseID != "l1" || done.Offset == nil || *done.Offset != 7 || done.TransactionID != "" ||
		done.Status != protocol.AckCompleted || done.Error != "" {
		t.Fatalf("Completed: %+v", done)
	}
	bad := m.Failed("bad input")
	if bad.Status != protocol.AckFailed || *bad.Offset != 7 || bad.TransactionID != "" || bad.Error != "bad input" {
		t.Fatalf("Failed: %+v", bad)
	}
	// The functions of earlier versions are the same helpers.
	if f := queenside.Completed(m); *f.Offset != 7 || f.Status != done.Status || f.LeaseID != done.LeaseID {
		t.Fatalf("Completed(m) %+v differs from m.Completed()", f)
	}
	if f := queenside.Failed(m, "x"); f.Status != protocol.AckFailed || f.Error != "x" {
		t.Fatalf("Failed(m) %+v", f)
	}
	body, err := protocol.Marshal(done)
	if err != nil {
		t.Fatal(err)
	}
	var wire map[string]any
	if err := protocol.Unmarshal(body, &wire); err != nil {
		t.Fatal(err)
	}
	if len(wire) != 3 || wire["leaseId"] != "l1" || wire["status"] != "completed" {
		t.Fatalf("wire item %v, want leaseId, offset and status only", wire)
	}
}

func TestAckMessagesRefusesAMessageWithoutALease(t *testing.T) {
	s := newScripted(t, failFirst(0, protocol.CodeUnavailable))
	c := dialScripted(t, s)
	_, err := c.AckMessages(context.Background(), queenside.Message{Queue: "q", Offset: 1})
	if err == nil || !strings.Contains(err.Error(), "AutoAck") {
		t.Fatalf("got %v, want a local error naming AutoAck", err)
	}
	if n, _ := s.count(); n != 0 {
		t.Fatalf("%d requests sent", n)
	}
}

// m.Decode decodes the payload as json.Unmarshal decodes JSON: into a
// struct by its msgpack tags, a map, any value; a mismatch is an error
// naming the message.
func TestDecodeReadsThePayloadIntoAValue(t *testing.T) {
	c := dial(t, startSidecar(t))
	ctx := context.Background()
	it, err := queenside.Item("dec", map[string]any{"sku": "A1", "qty": 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Push(ctx, it); err != nil {
		t.Fatal(err)
	}
	res, err := c.Pop(ctx, queenside.PopArgs{Queue: "dec", AutoAck: true})
	if err != nil || len(res.Messages) != 1 {
		t.Fatalf("pop: %+v, %v", res, err)
	}
	m := res.Messages[0]
	var order struct {
		SKU string `msgpack:"sku"`
		Qty int    `msgpack:"qty"`
	}
	if err := m.Decode(&order); err != nil || order.SKU != "A1" || order.Qty != 2 {
		t.Fatalf("into a struct: %+v, %v", order, err)
	}
	var asMap map[string]any
	if err := m.Decode(&asMap); err != nil || asMap["sku"] != "A1" || len(asMap) != 2 {
		t.Fatalf("into a map: %v, %v", asMap, err)
	}
	var n int
	if err := m.Decode(&n); err == nil || !strings.Contains(err.Error(), "decode the payload of dec/Default offset 0") {
		t.Fatalf("into an int: %v", err)
	}
}
