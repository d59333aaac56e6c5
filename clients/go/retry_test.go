package queenside_test

import (
	"context"
	"errors"
	"testing"
	"time"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar"
	"github.com/queenside/queenside/sidecar/pgtest"
	"github.com/queenside/queenside/sidecar/store"
)

func dialScripted(t *testing.T, s *scripted, opts ...queenside.Option) *queenside.Client {
	t.Helper()
	c, err := queenside.Dial(context.Background(), s.path, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func wantCode(t *testing.T, err error, code protocol.Code) {
	t.Helper()
	var qe *queenside.Error
	if !errors.As(err, &qe) || qe.Code != code {
		t.Fatalf("error %v, want %s", err, code)
	}
}

func TestConfigureIsRetriedAfterUnavailable(t *testing.T) {
	s := newScripted(t, failFirst(2, protocol.CodeUnavailable))
	c := dialScripted(t, s)
	if _, err := c.Configure(context.Background(), "q", queenside.DefaultQueueOptions()); err != nil {
		t.Fatalf("configure: %v", err)
	}
	if n, ops := s.count(); n != 3 {
		t.Fatalf("requests %v, want configure three times", ops)
	}
}

// Each operation, answered unavailable once: sent again only if a repeat
// cannot do more than the first would have.
func TestUnavailableIsRetriedOnlyWhereHarmless(t *testing.T) {
	item := func(txid string) queenside.PushItem {
		it, _ := queenside.Item("q", 1)
		it.TransactionID = txid
		return it
	}
	msg := queenside.Message{Queue: "q", Partition: "Default", Offset: 3, LeaseID: "l1", TransactionID: "t3"}
	on, off := true, false
	cases := []struct {
		name    string
		call    func(context.Context, *queenside.Client) error
		retried bool
	}{
		{"configure", func(ctx context.Context, c *queenside.Client) error {
			_, err := c.Configure(ctx, "q", queenside.DefaultQueueOptions())
			return err
		}, true},
		{"stats", func(ctx context.Context, c *queenside.Client) error { _, err := c.Stats(ctx, "q"); return err }, true},
		{"queues", func(ctx context.Context, c *queenside.Client) error { _, err := c.Queues(ctx); return err }, true},
		{"groups", func(ctx context.Context, c *queenside.Client) error { _, err := c.Groups(ctx, ""); return err }, true},
		{"dlq", func(ctx context.Context, c *queenside.Client) error {
			_, err := c.DLQ(ctx, queenside.DLQArgs{Queue: "q"})
			return err
		}, true},
		{"maintenance read", func(ctx context.Context, c *queenside.Client) error {
			_, err := c.Maintenance(ctx, nil, nil)
			return err
		}, true},
		{"push with transaction ids", func(ctx context.Context, c *queenside.Client) error {
			_, err := c.Push(ctx, item("a"), item("b"))
			return err
		}, true},
		{"push with a generated id", func(ctx context.Context, c *queenside.Client) error {
			_, err := c.Push(ctx, item("a"), item(""))
			return err
		}, false},
		{"pop", func(ctx context.Context, c *queenside.Client) error {
			_, err := c.Pop(ctx, queenside.PopArgs{Queue: "q"})
			return err
		}, false},
		{"ack", func(ctx context.Context, c *queenside.Client) error {
			_, err := c.Ack(ctx, msg.Completed())
			return err
		}, false},
		{"ack messages", func(ctx context.Context, c *queenside.Client) error { _, err := c.AckMessages(ctx, msg); return err }, false},
		{"renew", func(ctx context.Context, c *queenside.Client) error { _, err := c.Renew(ctx, 0, "l1"); return err }, false},
		{"release", func(ctx context.Context, c *queenside.Client) error { _, err := c.Release(ctx, "l1"); return err }, false},
		{"transaction", func(ctx context.Context, c *queenside.Client) error {
			_, err := c.Transaction(ctx, []queenside.AckItem{msg.Completed()}, []queenside.PushItem{item("a")})
			return err
		}, false},
		{"seek", func(ctx context.Context, c *queenside.Client) error {
			_, err := c.Seek(ctx, "q", "g", "", queenside.SeekEnd)
			return err
		}, false},
		{"deleteGroup", func(ctx context.Context, c *queenside.Client) error {
			_, err := c.DeleteGroup(ctx, "q", "g")
			return err
		}, false},
		{"dlqReplay", func(ctx context.Context, c *queenside.Client) error { _, err := c.DLQReplay(ctx, 1); return err }, false},
		{"dlqReplay by filter", func(ctx context.Context, c *queenside.Client) error {
			_, err := c.DLQReplayBatch(ctx, queenside.DLQReplayArgs{DLQSelection: queenside.DLQSelection{DLQFilter: queenside.DLQFilter{Queue: "q"}}})
			return err
		}, false},
		{"dlqDelete", func(ctx context.Context, c *queenside.Client) error {
			_, err := c.DLQDelete(ctx, queenside.DLQSelection{IDs: []int64{1}})
			return err
		}, false},
		{"dlqSummary", func(ctx context.Context, c *queenside.Client) error { _, err := c.DLQSummary(ctx, "q", 0); return err }, true},
		{"maintenance change", func(ctx context.Context, c *queenside.Client) error {
			_, err := c.Maintenance(ctx, &on, &off)
			return err
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newScripted(t, failFirst(1, protocol.CodeUnavailable))
			c := dialScripted(t, s)
			err := tc.call(context.Background(), c)
			n, ops := s.count()
			if tc.retried {
				if err != nil || n != 2 {
					t.Fatalf("err %v after requests %v; want it sent again and answered", err, ops)
				}
				return
			}
			wantCode(t, err, protocol.CodeUnavailable)
			if n != 1 {
				t.Fatalf("requests %v; a call that may have had an effect must not be sent again", ops)
			}
		})
	}
}

// draining means the request was refused before it was served: any call
// may be sent again, a pop included.
func TestDrainingIsRetriedUntilTheNotice(t *testing.T) {
	s := newScripted(t, failFirst(1, protocol.CodeDraining))
	c := dialScripted(t, s)
	if _, err := c.Pop(context.Background(), queenside.PopArgs{Queue: "q"}); err != nil {
		t.Fatal(err)
	}
	if n, ops := s.count(); n != 2 {
		t.Fatalf("requests %v, want the pop twice", ops)
	}

	// Once the connection got the drain notice, nothing on it will change.
	s = newScripted(t, func(_ int, req protocol.Request) reply {
		r := errorReply(req, protocol.CodeDraining)
		r.before = []protocol.Response{{Notice: protocol.NoticeDraining}}
		return r
	})
	c = dialScripted(t, s)
	_, err := c.Stats(context.Background(), "q")
	wantCode(t, err, protocol.CodeDraining)
	if n, _ := s.count(); n != 1 || !c.Draining() {
		t.Fatalf("%d requests (draining %v); after the notice the answer goes to the caller at once", n, c.Draining())
	}
}

func TestRetriesEndAtTheDeadline(t *testing.T) {
	s := newScripted(t, failFirst(1<<30, protocol.CodeUnavailable))
	c := dialScripted(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Stats(ctx, "q")
	took := time.Since(start)
	wantCode(t, err, protocol.CodeUnavailable) // the last answer, not the context's error
	n, _ := s.count()
	// 50 ms doubling (each drawn from half to all of it): at least 25, 50,
	// 100 and 200 ms fit in 600 ms, so four attempts or more.
	// No attempt starts after the deadline; the last one may end a little
	// after it, hence the margin.
	if n < 4 || took > 700*time.Millisecond {
		t.Fatalf("%d attempts in %v; want several, ending by the deadline", n, took)
	}
	if last := s.request(n - 1).TimeoutMs; last == 0 || last >= 600 {
		t.Fatalf("last attempt carried timeoutMs %d: it should carry what is left of the deadline", last)
	}
}

func TestRetriesWithoutADeadlineEndAfterMaxElapsed(t *testing.T) {
	s := newScripted(t, failFirst(1<<30, protocol.CodeUnavailable))
	c := dialScripted(t, s, queenside.WithRetry(queenside.RetryPolicy{MaxElapsed: 400 * time.Millisecond}))
	start := time.Now()
	_, err := c.Queues(context.Background())
	took := time.Since(start)
	wantCode(t, err, protocol.CodeUnavailable)
	if n, _ := s.count(); n < 3 || took > 500*time.Millisecond {
		t.Fatalf("%d attempts in %v; want several within MaxElapsed", n, took)
	}
	if s.request(0).TimeoutMs != 0 {
		t.Fatal("a call without a deadline sent a timeoutMs")
	}
}

func TestCancellingDuringAPauseEndsTheCall(t *testing.T) {
	s := newScripted(t, failFirst(1<<30, protocol.CodeUnavailable))
	c := dialScripted(t, s, queenside.WithRetry(queenside.RetryPolicy{InitialDelay: 4 * time.Second, MaxElapsed: 20 * time.Second}))
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	_, err := c.Stats(ctx, "q")
	if !errors.Is(err, context.Canceled) || time.Since(start) > 1500*time.Millisecond {
		t.Fatalf("got %v after %v; want the cancellation, at once", err, time.Since(start))
	}
	if n, _ := s.count(); n != 1 {
		t.Fatalf("%d requests, want 1", n)
	}
}

func TestWithoutRetrySendsOnce(t *testing.T) {
	s := newScripted(t, failFirst(1, protocol.CodeUnavailable))
	c := dialScripted(t, s, queenside.WithoutRetry())
	_, err := c.Configure(context.Background(), "q", queenside.DefaultQueueOptions())
	wantCode(t, err, protocol.CodeUnavailable)
	if n, _ := s.count(); n != 1 {
		t.Fatalf("%d requests, want 1", n)
	}
}

// Other codes, retryable or not, go to the caller: overloaded, say, is
// retryable by the protocol but may follow an operation that took effect.
func TestOtherCodesAreNotRetried(t *testing.T) {
	for _, code := range []protocol.Code{protocol.CodeOverloaded, protocol.CodeInternal, protocol.CodeDeadlineExceeded, protocol.CodeInvalidArgument} {
		s := newScripted(t, failFirst(1, code))
		c := dialScripted(t, s)
		_, err := c.Stats(context.Background(), "q")
		wantCode(t, err, code)
		if n, _ := s.count(); n != 1 {
			t.Fatalf("%s: %d requests, want 1", code, n)
		}
	}
}

// A real sidecar serves its socket before its schema is ready: a configure
// sent then is served once it is, the caller doing nothing more (the
// sidecar holds the request up to 5 s, and an unavailable it answers
// meanwhile is sent again by the client).
func TestConfigureWaitsForASidecarThatIsNotReady(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, pgtest.NewDatabase(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	path := socketPath(t)
	ln, err := sidecar.ListenSocket(path, 0o660)
	if err != nil {
		t.Fatal(err)
	}
	srv := sidecar.New(st, sidecar.Options{})
	go srv.Serve(ln) //nolint:errcheck
	t.Cleanup(func() { srv.Close(); st.Close() })
	time.AfterFunc(300*time.Millisecond, srv.SetReady)

	c := dial(t, path)
	opts := queenside.DefaultQueueOptions()
	opts.RetryLimit = 9
	start := time.Now()
	got, err := c.Configure(ctx, "early", opts)
	if err != nil || got != opts {
		t.Fatalf("configure: %+v, %v", got, err)
	}
	if took := time.Since(start); took < 250*time.Millisecond {
		t.Fatalf("answered after %v, before the sidecar was ready", took)
	}
}
