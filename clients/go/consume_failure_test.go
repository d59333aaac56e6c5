package queenside_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
)

// logBuffer collects a slog.Logger's records as JSON lines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) logger() *slog.Logger { return slog.New(slog.NewJSONHandler(b, nil)) }

// records returns the records logged, each as its JSON object.
func (b *logBuffer) records(t *testing.T) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(b.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// A failure is logged at warning level, and the retry comes after a
// growing wait, during which the lease is held (renewed past its 1 s): no
// other consumer gets the partition, and the order is kept.
func TestConsumeRetriesAFailureAfterABackoffHoldingTheLease(t *testing.T) {
	path := startSidecar(t)
	c, rival := dial(t, path), dial(t, path)
	pushMany(t, c, "flaky", 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var logs logBuffer
	var mu sync.Mutex
	var rivalGot int
	rivalDone := make(chan struct{})
	rivalTries := func() { // a rival consumer of the same queue, trying all along
		defer close(rivalDone)
		for ctx.Err() == nil {
			res, err := rival.Pop(ctx, queenside.PopArgs{Queue: "flaky", Batch: 10})
			if err == nil && len(res.Messages) > 0 {
				mu.Lock()
				rivalGot += len(res.Messages)
				mu.Unlock()
				rival.AckMessages(context.Background(), res.Messages...) //nolint:errcheck
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	var seen []int64
	var firstTries []time.Time
	stats, err := c.Consume(ctx, "flaky", func(_ context.Context, m queenside.Message) error {
		seen = append(seen, m.Offset)
		if m.Offset == 0 && len(firstTries) < 3 {
			if len(firstTries) == 0 {
				go rivalTries() // from now on the consumer holds the partition
			}
			firstTries = append(firstTries, time.Now())
			return fmt.Errorf("transient %d", len(firstTries))
		}
		if m.Offset == 2 {
			cancel()
		}
		return nil
	}, queenside.ConsumeOptions{
		Batch: 10, WaitMs: 200, LeaseSeconds: 1, RenewEvery: 200 * time.Millisecond, Logger: logs.logger(),
		FailureBackoff: queenside.Backoff{Initial: 300 * time.Millisecond, Max: 1000 * time.Millisecond},
	})
	<-rivalDone
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(seen) != "[0 0 0 0 1 2]" || stats.Completed != 3 || stats.Failed != 3 {
		t.Fatalf("handled %v, stats %+v; want [0 0 0 0 1 2], 3 completed, 3 failed", seen, stats)
	}
	if rivalGot != 0 {
		t.Fatalf("a rival got %d messages while the failure waited: the lease was not held", rivalGot)
	}
	// The waits: 300 ms, 600 ms, then 1 s (1.2 s capped).
	waits := []time.Duration{300 * time.Millisecond, 600 * time.Millisecond, time.Second}
	for i := 1; i < len(firstTries); i++ {
		if gap := firstTries[i].Sub(firstTries[i-1]); gap < waits[i-1] || gap > waits[i-1]+time.Second {
			t.Errorf("retry %d came %v after the failure, want %v", i, gap, waits[i-1])
		}
	}
	recs := logs.records(t)
	if len(recs) != 3 {
		t.Fatalf("%d records logged, want 3: %v", len(recs), recs)
	}
	for i, r := range recs {
		want := map[string]any{
			"level": "WARN", "queue": "flaky", "partition": "Default", "offset": 0.0,
			"error": fmt.Sprintf("transient %d", i+1), "failures": float64(i + 1), "retryIn": float64(waits[i]),
		}
		for k, v := range want {
			if r[k] != v {
				t.Errorf("record %d: %s = %v, want %v (%v)", i, k, r[k], v, r)
			}
		}
	}
}

// A stop during the wait ends it at once, and the failure is acked:
// charged, the message comes again.
func TestConsumeStopDuringABackoffAcksTheFailure(t *testing.T) {
	path := startSidecar(t)
	c, next := dial(t, path), dial(t, path)
	pushMany(t, c, "longwait", 2)
	ctx, cancel := context.WithCancel(context.Background())
	var logs logBuffer
	var stopped time.Time
	stats, err := c.Consume(ctx, "longwait", func(_ context.Context, m queenside.Message) error {
		go func() { time.Sleep(300 * time.Millisecond); stopped = time.Now(); cancel() }()
		return errors.New("broken")
	}, queenside.ConsumeOptions{Batch: 10, WaitMs: 200, LeaseSeconds: 60, Logger: logs.logger(),
		FailureBackoff: queenside.Backoff{Initial: 30 * time.Second}})
	if err != nil || stats.Failed != 1 || stats.Completed != 0 {
		t.Fatalf("stats %+v, %v", stats, err)
	}
	if took := time.Since(stopped); took > time.Second {
		t.Fatalf("Consume returned %v after the stop, in a 30 s wait", took)
	}
	res, err := next.Pop(context.Background(), queenside.PopArgs{Queue: "longwait", Batch: 10})
	if err != nil || len(res.Messages) != 2 || res.Messages[0].Offset != 0 || res.Leases[0].HeadAttempts != 2 {
		t.Fatalf("after the stop: %+v, %v; want offset 0 delivered a second time", res, err)
	}
	if recs := logs.records(t); len(recs) != 1 || recs[0]["retryIn"] != float64(30*time.Second) {
		t.Fatalf("logged %v", recs)
	}
}

// With the backoff disabled a failure is nacked at once, and still logged.
func TestConsumeWithoutBackoffRetriesAtOnce(t *testing.T) {
	c := dial(t, startSidecar(t))
	pushMany(t, c, "nowait", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var logs logBuffer
	tries := 0
	start := time.Now()
	stats, err := c.Consume(ctx, "nowait", func(_ context.Context, m queenside.Message) error {
		if tries++; tries <= 3 {
			return errors.New("again")
		}
		cancel()
		return nil
	}, queenside.ConsumeOptions{WaitMs: 200, Logger: logs.logger(), FailureBackoff: queenside.Backoff{Disabled: true}})
	if err != nil || stats.Failed != 3 || stats.Completed != 1 {
		t.Fatalf("stats %+v, %v", stats, err)
	}
	if took := time.Since(start); took > 900*time.Millisecond {
		t.Fatalf("3 failures took %v without a backoff", took)
	}
	if recs := logs.records(t); len(recs) != 3 || recs[2]["retryIn"] != 0.0 || recs[2]["failures"] != 3.0 {
		t.Fatalf("logged %v", recs)
	}
}

// Without a Logger, failures go to slog.Default().
func TestConsumeLogsFailuresToTheDefaultLogger(t *testing.T) {
	c := dial(t, startSidecar(t))
	pushMany(t, c, "deflog", 1)
	var logs logBuffer
	old := slog.Default()
	slog.SetDefault(logs.logger())
	defer slog.SetDefault(old)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	failed := false
	_, err := c.Consume(ctx, "deflog", func(_ context.Context, m queenside.Message) error {
		if !failed {
			failed = true
			return errors.New("first try fails")
		}
		cancel()
		return nil
	}, queenside.ConsumeOptions{WaitMs: 200, FailureBackoff: queenside.Backoff{Initial: 10 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	if recs := logs.records(t); len(recs) != 1 || recs[0]["error"] != "first try fails" || recs[0]["level"] != "WARN" {
		t.Fatalf("the default logger got %v", recs)
	}
}

// ackScript is a stand-in sidecar that delivers one message, then nothing,
// and answers every ack item with code.
func ackScript(code string) func(int, protocol.Request) reply {
	var mu sync.Mutex
	popped := false
	return func(_ int, req protocol.Request) reply {
		mu.Lock()
		defer mu.Unlock()
		result := func(v any) reply {
			b, _ := protocol.Marshal(v)
			return reply{answer: protocol.Response{ID: req.ID, Result: b}}
		}
		switch req.Op {
		case protocol.OpPop:
			if popped {
				return result(queenside.PopResult{})
			}
			popped = true
			payload, _ := protocol.Marshal("x")
			return result(queenside.PopResult{
				Messages: []queenside.Message{{Queue: "q", Partition: "p", Offset: 0, LeaseID: "L", Payload: payload}},
				Leases: []queenside.Lease{{LeaseID: "L", Queue: "q", Partition: "p", FromOffset: 0, ToOffset: 0,
					ExpiresAt: time.Now().Add(time.Minute), HeadAttempts: 1}},
			})
		case protocol.OpAck:
			a, _ := protocol.DecodeAckArgs(req.Args)
			res := queenside.AckResult{}
			for i := range a.Items {
				res.Results = append(res.Results, queenside.AckItemResult{Index: i, Code: code})
			}
			if a.Pop != nil {
				res.Pop = &queenside.PopResult{}
			}
			return result(res)
		}
		return resultReply(req)
	}
}

// An ack item answered already_acked was settled by an earlier ack: the
// consume loop neither warns of it nor reports it as lost; one answered
// lease_expired is reported, in words.
func TestConsumeTakesAlreadyAckedForSettled(t *testing.T) {
	for _, code := range []string{protocol.ItemAlreadyAcked, protocol.ItemLeaseExpired} {
		for _, async := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/async=%v", code, async), func(t *testing.T) {
				c := dialScripted(t, newScripted(t, ackScript(code)))
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				var logs logBuffer
				stats, err := c.Consume(ctx, "q", func(context.Context, queenside.Message) error {
					cancel()
					return nil
				}, queenside.ConsumeOptions{AckAsync: async, Logger: logs.logger()})
				if stats.Completed != 1 {
					t.Fatalf("stats %+v", stats)
				}
				recs := logs.records(t)
				lost := code != protocol.ItemAlreadyAcked
				if !async {
					if err != nil {
						t.Fatal(err)
					}
					if !lost && len(recs) != 0 {
						t.Fatalf("already_acked logged: %v", recs)
					}
					if lost && (len(recs) != 1 || recs[0]["msg"] != "queenside: ack item 0 (offset 0): lease expired (lease_expired); the message will be delivered again") {
						t.Fatalf("a lost ack logged %v", recs)
					}
					return
				}
				var ae *queenside.AckError
				if !lost && err != nil {
					t.Fatalf("already_acked ended Consume: %v", err)
				}
				if lost && (!errors.As(err, &ae) || !strings.Contains(err.Error(), "ack item 0 (offset 0): lease expired (lease_expired)")) {
					t.Fatalf("a lost ack: Consume returned %v", err)
				}
			})
		}
	}
}

// The same popped message acked twice: the second answer says it was
// already acknowledged, not that a lease expired.
func TestSecondAckOfAMessageAnswersAlreadyAcked(t *testing.T) {
	c := dial(t, startSidecar(t))
	ctx := context.Background()
	pushMany(t, c, "twice", 2)
	res, err := c.Pop(ctx, queenside.PopArgs{Queue: "twice", Batch: 2})
	if err != nil || len(res.Messages) != 2 {
		t.Fatalf("pop: %+v, %v", res, err)
	}
	first, err := c.AckMessages(ctx, res.Messages...)
	if err != nil || !first.Results[0].Success || !first.Results[1].Success {
		t.Fatalf("first ack: %+v, %v", first, err)
	}
	second, err := c.AckMessages(ctx, res.Messages[0])
	if err != nil {
		t.Fatal(err)
	}
	if r := second.Results[0]; r.Success || r.Code != protocol.ItemAlreadyAcked {
		t.Fatalf("second ack answered %+v, want success false, code already_acked", r)
	}
	if text := queenside.ItemCodeText(second.Results[0].Code); text != "already acknowledged" {
		t.Fatalf("ItemCodeText says %q", text)
	}
}
