package queenside_test

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
)

func TestConsumeRefusesANilHandler(t *testing.T) {
	s := newScripted(t, func(_ int, req protocol.Request) reply { return resultReply(req) })
	c := dialScripted(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stats, err := c.Consume(ctx, "q", nil, queenside.ConsumeOptions{})
	if err == nil || !strings.Contains(err.Error(), "consume needs a handler") {
		t.Fatalf("Consume with a nil handler returned %v", err)
	}
	if stats != (queenside.ConsumeStats{}) {
		t.Fatalf("stats %+v", stats)
	}
	if n, ops := s.count(); n != 0 {
		t.Fatalf("%d requests sent (%v) before the refusal", n, ops)
	}
}

// By default the first SIGINT or SIGTERM stops Consume as a cancel does:
// the message in hand finishes (its handler's context is not cancelled),
// what completed is acked, the rest is released for another consumer at
// once, and Consume returns its counts and no error.
func TestConsumeStopsOnTheFirstSignal(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			path := startSidecar(t)
			c, next := dial(t, path), dial(t, path)
			pushMany(t, c, "sig", 10)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			handled := 0
			stats, err := c.Consume(ctx, "sig", func(hctx context.Context, m queenside.Message) error {
				handled++
				if m.Offset == 2 {
					if err := syscall.Kill(os.Getpid(), sig); err != nil {
						return err
					}
					time.Sleep(300 * time.Millisecond) // the signal arrives while message 2 is in hand
					if hctx.Err() != nil {
						t.Errorf("the signal cancelled the handler's context: %v", hctx.Err())
					}
				}
				return nil
			}, queenside.ConsumeOptions{Batch: 10, LeaseSeconds: 60, WaitMs: 200})
			if err != nil {
				t.Fatal(err)
			}
			if handled != 3 || stats.Completed != 3 || stats.Failed != 0 {
				t.Fatalf("handled %d, stats %+v; want 3 completed (0, 1 and the one in hand)", handled, stats)
			}
			start := time.Now()
			res, err := next.Pop(context.Background(), queenside.PopArgs{Queue: "sig", Batch: 10})
			if err != nil || len(res.Messages) != 7 || res.Messages[0].Offset != 3 || time.Since(start) > time.Second {
				t.Fatalf("after the stop another consumer got %d messages (%v) in %v", len(res.Messages), err, time.Since(start))
			}
		})
	}
}

// IgnoreSignals leaves the signals to the program.
func TestConsumeIgnoreSignalsKeepsConsuming(t *testing.T) {
	c := dial(t, startSidecar(t))
	pushMany(t, c, "nosig", 10)
	mine := make(chan os.Signal, 1)
	signal.Notify(mine, syscall.SIGINT) // this test binary's own handling
	defer signal.Stop(mine)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stats, err := c.Consume(ctx, "nosig", func(_ context.Context, m queenside.Message) error {
		switch m.Offset {
		case 2:
			if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
				return err
			}
			select {
			case <-mine:
			case <-time.After(5 * time.Second):
				t.Error("the signal never came")
			}
			time.Sleep(100 * time.Millisecond)
		case 9:
			cancel()
		}
		return nil
	}, queenside.ConsumeOptions{Batch: 10, WaitMs: 200, IgnoreSignals: true})
	if err != nil || stats.Completed != 10 {
		t.Fatalf("stats %+v, %v: want all 10 handled despite the signal", stats, err)
	}
}

// A second signal acts as it would without Consume: the handling before
// it is restored as soon as the first came. The program's handler never
// returns, so the first signal cannot end it; the second does.
func TestConsumeSecondSignalInterrupts(t *testing.T) {
	path := startSidecar(t)
	c := dial(t, path)
	pushMany(t, c, "stubborn", 3)
	bin := filepath.Join(t.TempDir(), "stubborn")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/stubborn").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "stubborn")
	cmd.Env = append(os.Environ(), "QUEENSIDE_SOCKET="+path)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill() //nolint:errcheck // when the test failed midway
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() || lines.Text() != "handling 0" {
		t.Fatalf("the program said %q, want handling 0", lines.Text())
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	cmd.Process.Signal(syscall.SIGINT) //nolint:errcheck
	select {
	case err := <-exited:
		t.Fatalf("the first SIGINT ended the program (%v): it should only ask Consume to stop", err)
	case <-time.After(time.Second):
	}
	cmd.Process.Signal(syscall.SIGINT) //nolint:errcheck
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGINT {
			t.Fatalf("after the second SIGINT the program ended with %v, want killed by SIGINT", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the second SIGINT did not interrupt the program")
	}
}

// A deadline is a stop like a cancel: no error, the counts, and the stop
// comes at the deadline although a long-poll was in flight.
func TestConsumeDeadlineIsACleanStop(t *testing.T) {
	c := dial(t, startSidecar(t))
	pushMany(t, c, "deadline", 5)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	stats, err := c.Consume(ctx, "deadline", func(context.Context, queenside.Message) error { return nil },
		queenside.ConsumeOptions{WaitMs: 10000})
	if err != nil || stats.Completed != 5 {
		t.Fatalf("Consume ended by its deadline returned %+v, %v; want 5 completed and no error", stats, err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("Consume returned %v after it started, a deadline of 2 s", took)
	}
	st, _ := c.Stats(context.Background(), "deadline")
	if g := st.Partitions[0].Groups[0]; g.Cursor != 5 || g.Leased {
		t.Fatalf("after the deadline: %+v", g)
	}
}

// A stop does not wait out a long-poll: Consume returns at once, and what
// the abandoned pop leases when a message comes is released when its
// answer arrives, so another consumer gets the message at once.
func TestConsumeStopDoesNotWaitOutALongPoll(t *testing.T) {
	path := startSidecar(t)
	c, next := dial(t, path), dial(t, path)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, err := c.Consume(ctx, "idle", func(context.Context, queenside.Message) error {
			t.Error("nothing was pushed yet")
			return nil
		}, queenside.ConsumeOptions{WaitMs: 10000, LeaseSeconds: 60})
		if err != nil {
			t.Error(err)
		}
	}()
	time.Sleep(500 * time.Millisecond) // the pop waits at the sidecar
	stopped := time.Now()
	cancel()
	wg.Wait()
	if took := time.Since(stopped); took > time.Second {
		t.Fatalf("Consume returned %v after the stop, waiting out the long-poll", took)
	}
	// The abandoned pop still waits at the sidecar: it gets this message.
	pushMany(t, next, "idle", 1)
	time.Sleep(500 * time.Millisecond)
	res, err := next.Pop(context.Background(), queenside.PopArgs{Queue: "idle", Batch: 10})
	if err != nil || len(res.Messages) != 1 {
		t.Fatalf("another consumer got %d messages (%v): the abandoned pop's lease was not released", len(res.Messages), err)
	}
}
