package queenside_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
)

// sharedCases is clients/testdata/cases.json, the cases the Go, Python and
// Node clients' tests all check: the same call behaves the same in the
// three. Its unknownOptions do not apply to Go, whose option structs
// refuse an unknown field when the program is compiled.
type sharedCases struct {
	TransactionIDs []struct {
		Parts []json.RawMessage `json:"parts"`
		ID    string            `json:"id"`
	} `json:"transactionIds"`
	TransactionIDRefusals []struct {
		Parts []json.RawMessage `json:"parts"`
		Why   string            `json:"why"`
	} `json:"transactionIdRefusals"`
	ConsumeDefaults struct {
		Batch          int  `json:"batch"`
		Partitions     int  `json:"partitions"`
		Concurrency    int  `json:"concurrency"`
		WaitMs         int  `json:"waitMs"`
		StopOnSignals  bool `json:"stopOnSignals"`
		FailureBackoff struct {
			InitialMs int `json:"initialMs"`
			MaxMs     int `json:"maxMs"`
		} `json:"failureBackoff"`
	} `json:"consumeDefaults"`
	ConcurrencyMax       int `json:"concurrencyMax"`
	FailureBackoffDelays []struct {
		Failures int `json:"failures"`
		DelayMs  int `json:"delayMs"`
	} `json:"failureBackoffDelays"`
	PushRefusals []struct {
		Item  map[string]json.RawMessage `json:"item"`
		Error string                     `json:"error"`
	} `json:"pushRefusals"`
	PushAccepted []struct {
		Item map[string]json.RawMessage `json:"item"`
		Why  string                     `json:"why"`
	} `json:"pushAccepted"`
}

func loadCases(t *testing.T) sharedCases {
	t.Helper()
	raw, err := os.ReadFile("../testdata/cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var c sharedCases
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	if len(c.TransactionIDs) == 0 || len(c.TransactionIDRefusals) == 0 || len(c.FailureBackoffDelays) == 0 ||
		len(c.PushRefusals) == 0 || len(c.PushAccepted) == 0 || c.ConsumeDefaults.Batch == 0 {
		t.Fatalf("cases.json lacks a section this test reads: %+v", c)
	}
	return c
}

// txidPart turns a part of cases.json into its Go value: a JSON string is
// a string, a JSON integer an int64, {"bytes": hex} a []byte, {"int":
// decimal} an int64 or, beyond it, a uint64; true, 1.5 and null stay a
// bool, a float64 and nil.
func txidPart(t *testing.T, raw json.RawMessage) any {
	t.Helper()
	var obj map[string]string
	if json.Unmarshal(raw, &obj) == nil && obj != nil {
		if h, ok := obj["bytes"]; ok {
			b, err := hex.DecodeString(h)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		if d, ok := obj["int"]; ok {
			if i, err := strconv.ParseInt(d, 10, 64); err == nil {
				return i
			}
			u, err := strconv.ParseUint(d, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return u
		}
		t.Fatalf("part %s", raw)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatal(err)
	}
	if n, ok := v.(json.Number); ok {
		if i, err := n.Int64(); err == nil {
			return i
		}
		f, _ := n.Float64()
		return f
	}
	return v
}

func TestTransactionIDVectors(t *testing.T) {
	for _, tc := range loadCases(t).TransactionIDs {
		parts := make([]any, len(tc.Parts))
		for i, p := range tc.Parts {
			parts[i] = txidPart(t, p)
		}
		if got := queenside.TransactionID(parts...); got != tc.ID {
			t.Errorf("TransactionID(%v) = %s, want %s", parts, got, tc.ID)
		}
	}
	// Every int and uint kind, and named types of them, give what the
	// decimal string gives.
	type orderNo uint16
	type sku string
	want := queenside.TransactionID("order", "7", "A1")
	for _, n := range []any{7, int8(7), int16(7), int32(7), int64(7), uint(7), uint8(7), uint16(7), uint32(7), uint64(7), orderNo(7)} {
		if got := queenside.TransactionID("order", n, sku("A1")); got != want {
			t.Errorf("TransactionID with %T(7) = %s, want %s", n, got, want)
		}
	}
}

func TestTransactionIDRefusesWhatIsNotAPart(t *testing.T) {
	for _, tc := range loadCases(t).TransactionIDRefusals {
		parts := []any{"order"} // a good part first: the refused one is at index 1
		for _, p := range tc.Parts {
			parts = append(parts, txidPart(t, p))
		}
		if len(tc.Parts) == 0 {
			parts = nil
		}
		msg := panicOf(func() { queenside.TransactionID(parts...) })
		if msg == "" {
			t.Errorf("%s: TransactionID(%v) did not panic", tc.Why, parts)
			continue
		}
		if !strings.HasPrefix(msg, "queenside.TransactionID: ") {
			t.Errorf("%s: panic %q does not say where it comes from", tc.Why, msg)
		}
		kind := "nil"
		if len(parts) > 1 && parts[1] != nil {
			kind = fmt.Sprintf("%T", parts[1])
		}
		if len(tc.Parts) > 0 && (!strings.Contains(msg, "part 1 ") || !strings.Contains(msg, kind)) {
			t.Errorf("%s: panic %q does not name the part's position and type", tc.Why, msg)
		}
		t.Logf("%s: %s", tc.Why, msg)
	}
}

func panicOf(f func()) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg = fmt.Sprint(r)
		}
	}()
	f()
	return ""
}

// Consume without options pops as consumeDefaults says, and stops on
// signals (consume_stop_test.go); its failure backoff is checked below.
func TestConsumeDefaults(t *testing.T) {
	want := loadCases(t).ConsumeDefaults
	s := newScripted(t, func(_ int, req protocol.Request) reply { return resultReply(req) })
	c := dialScripted(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := c.Consume(ctx, "q", func(context.Context, queenside.Message) error { return nil }, queenside.ConsumeOptions{}); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.count(); n == 0 {
		t.Fatal("no pop sent")
	}
	req := s.request(0)
	p, err := protocol.DecodePopArgs(req.Args)
	if err != nil || req.Op != protocol.OpPop {
		t.Fatalf("first request %s: %v", req.Op, err)
	}
	if p.Batch != want.Batch || p.Partitions != want.Partitions || p.WaitMs != want.WaitMs {
		t.Fatalf("pop %+v, want batch %d, partitions %d, waitMs %d", p, want.Batch, want.Partitions, want.WaitMs)
	}
	if !want.StopOnSignals {
		t.Fatal("cases.json says consume does not stop on signals by default; the Go client does")
	}
	b := queenside.Backoff{}
	if b.Delay(1) != time.Duration(want.FailureBackoff.InitialMs)*time.Millisecond || b.Delay(1000) != time.Duration(want.FailureBackoff.MaxMs)*time.Millisecond {
		t.Fatalf("default backoff from %v up to %v, want %d ms up to %d ms", b.Delay(1), b.Delay(1000), want.FailureBackoff.InitialMs, want.FailureBackoff.MaxMs)
	}
}

func TestFailureBackoffDelays(t *testing.T) {
	for _, tc := range loadCases(t).FailureBackoffDelays {
		if got := (queenside.Backoff{}).Delay(tc.Failures); got != time.Duration(tc.DelayMs)*time.Millisecond {
			t.Errorf("Delay(%d) = %v, want %d ms", tc.Failures, got, tc.DelayMs)
		}
	}
	b := queenside.Backoff{Initial: 100 * time.Millisecond, Max: 250 * time.Millisecond}
	if b.Delay(1) != 100*time.Millisecond || b.Delay(2) != 200*time.Millisecond || b.Delay(3) != 250*time.Millisecond {
		t.Errorf("custom backoff: %v %v %v", b.Delay(1), b.Delay(2), b.Delay(3))
	}
	if d := (queenside.Backoff{Disabled: true}).Delay(3); d != 0 {
		t.Errorf("disabled backoff waits %v", d)
	}
}

// pushItem builds the push item a case describes: a key present is given,
// null included (msgpack's nil, as queenside.Item(q, nil) gives it).
func pushItem(t *testing.T, item map[string]json.RawMessage) queenside.PushItem {
	t.Helper()
	var it queenside.PushItem
	if q, ok := item["queue"]; ok {
		if err := json.Unmarshal(q, &it.Queue); err != nil {
			t.Fatal(err)
		}
	}
	if p, ok := item["payload"]; ok {
		var v any
		if err := json.Unmarshal(p, &v); err != nil {
			t.Fatal(err)
		}
		built, err := queenside.Item(it.Queue, v)
		if err != nil {
			t.Fatal(err)
		}
		it.Payload = built.Payload
	}
	return it
}

// An item without a queue or a payload is refused before anything is
// sent, as invalid_argument naming the item; the same item in Transaction
// too.
func TestPushRefusesAnItemWithoutPayloadOrQueue(t *testing.T) {
	s := newScripted(t, func(_ int, req protocol.Request) reply { return resultReply(req) })
	c := dialScripted(t, s)
	ctx := context.Background()
	good, err := queenside.Item("q", 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range loadCases(t).PushRefusals {
		bad := pushItem(t, tc.Item)
		want := "push item 1: " + tc.Error
		for call, send := range map[string]func() error{
			"Push":        func() error { _, err := c.Push(ctx, good, bad); return err },
			"Transaction": func() error { _, err := c.Transaction(ctx, nil, []queenside.PushItem{good, bad}); return err },
		} {
			err := send()
			var qe *queenside.Error
			if !errors.As(err, &qe) || qe.Code != protocol.CodeInvalidArgument || qe.Message != want || qe.Retryable {
				t.Errorf("%s of %v: got %v, want invalid_argument %q", call, tc.Item, err, want)
			}
		}
	}
	if n, ops := s.count(); n != 0 {
		t.Fatalf("%d requests sent (%v): a refused push must send nothing", n, ops)
	}
}

// null given as the payload is a payload: pushed, delivered, decoded as nil.
func TestPushAcceptsAnExplicitNullPayload(t *testing.T) {
	c := dial(t, startSidecar(t))
	ctx := context.Background()
	for _, tc := range loadCases(t).PushAccepted {
		it := pushItem(t, tc.Item)
		res, err := c.Push(ctx, it)
		if err != nil || len(res) != 1 || res[0].Status != protocol.StatusQueued {
			t.Fatalf("%s: push %v: %+v, %v", tc.Why, tc.Item, res, err)
		}
		popped, err := c.Pop(ctx, queenside.PopArgs{Queue: it.Queue, Batch: 10, AutoAck: true})
		if err != nil || len(popped.Messages) != 1 {
			t.Fatalf("%s: pop: %+v, %v", tc.Why, popped, err)
		}
		before := "not decoded"
		v := &before
		if err := popped.Messages[0].Decode(&v); err != nil || v != nil {
			t.Fatalf("%s: decoded %#v, %v; want nil", tc.Why, v, err)
		}
	}
}

func TestItemCodeTextSaysEveryCode(t *testing.T) {
	for _, c := range protocol.ItemCodes() {
		if got := queenside.ItemCodeText(c.Code); got != c.Text || got == "" {
			t.Errorf("ItemCodeText(%q) = %q, want %q", c.Code, got, c.Text)
		}
	}
	if got := queenside.ItemCodeText(protocol.ItemAlreadyAcked); got != "already acknowledged" {
		t.Errorf("ItemCodeText(already_acked) = %q", got)
	}
	if protocol.ItemAlreadyAcked != "already_acked" {
		t.Fatalf("protocol.ItemAlreadyAcked is %q", protocol.ItemAlreadyAcked)
	}
}
