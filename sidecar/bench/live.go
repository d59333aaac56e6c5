package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	queenside "github.com/queenside/queenside/clients/go"
)

// The consumers of the live queue (mixed and curve). By default they are
// what an application runs: the Go client's Consume loop with its
// defaults, only the group set, one loop a connection, with a handler that
// records each message's delivery time (and waits cfg.HandlerWait, to
// stand for a handler's I/O). --consumer pop runs the bench's own tuned
// cycle instead (pops of cfg.PopBatch messages from up to
// cfg.MixedPopPartitions partitions, each pop carrying the last one's
// acks), and --consumer-command runs a program per consumer, the Python or
// Node client's consume loop say (sidecar/bench/apps).

// Consumer kinds (Config.Consumer).
const (
	ConsumerLoop = "loop"
	ConsumerPop  = "pop"
)

// liveConsumers says what the live queue's consumers consume, and when
// they are done.
type liveConsumers struct {
	queue, group string
	// done is asked after deliveries and every few milliseconds: true ends
	// the consumers.
	done func() bool
	// waitMs is the long-poll of the pop cycle's next pop (the loops keep
	// their default: they stop at once, whatever their wait).
	waitMs func() int
	// count is told of every delivery, at the moment it was received.
	count func(n int, at time.Time)
}

// startConsumers makes cfg.MixedConsumers consumers ready to consume, on
// conns or as programs (those are started, and waited for until each has
// connected, so that a program's start is not counted in the window); the
// returned run then consumes until lc.done and returns what they received.
func (b *bench) startConsumers(ctx context.Context, conns []*queenside.Client, lc liveConsumers) (run func() *tally, err error) {
	parent := ctx
	ctx, stop := context.WithCancel(ctx)
	watch := func() { // done may become true with nothing delivered: look often
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for ctx.Err() == nil {
			if lc.done() {
				stop()
				return
			}
			select {
			case <-t.C:
			case <-ctx.Done():
			}
		}
	}
	if b.cfg.ConsumerCommand != "" {
		finish, err := b.commandConsumers(ctx, lc)
		if err != nil {
			stop()
			return nil, err
		}
		return func() *tally {
			defer stop()
			go watch()
			return finish()
		}, nil
	}
	return func() *tally {
		defer stop()
		go watch()
		return workers(conns, 1, func(_ int, c *queenside.Client, t *tally) {
			t.partitions = map[string]struct{}{}
			if b.cfg.Consumer == ConsumerPop {
				// Not ended mid-call: a pop's answer (and its acks'
				// results) is always read. It asks lc.done between pops,
				// whose wait lc.waitMs keeps short of the end.
				b.popCycle(parent, c, t, lc)
			} else {
				b.consumeLoopLive(ctx, stop, c, t, lc)
			}
		})
	}, nil
}

// popCycle is the bench's tuned consumer: one request a cycle, its pop
// carrying the acks of the last.
func (b *bench) popCycle(ctx context.Context, c *queenside.Client, t *tally, lc liveConsumers) {
	args := queenside.PopArgs{Queue: lc.queue, Group: lc.group, Batch: b.cfg.PopBatch, Partitions: b.cfg.MixedPopPartitions}
	y := &cycler{c: c, t: t}
	defer y.flush(ctx)
	for ctx.Err() == nil && !lc.done() {
		args.WaitMs = lc.waitMs()
		n := y.next(ctx, args)
		if n == 0 {
			if ctx.Err() == nil {
				t.emptyPops++
			}
			if args.WaitMs == 0 {
				sleep(ctx, time.Millisecond) // no long-poll asked for: do not spin
			}
			continue
		}
		wait(ctx, time.Duration(n)*b.cfg.HandlerWait)
		lc.count(n, time.Now())
	}
}

// consumeLoopLive runs the Go client's Consume with its defaults.
func (b *bench) consumeLoopLive(ctx context.Context, stop context.CancelFunc, c *queenside.Client, t *tally, lc liveConsumers) {
	var mu sync.Mutex // the handler runs on Concurrency goroutines
	_, err := c.Consume(ctx, lc.queue, func(_ context.Context, m queenside.Message) error {
		at := time.Now()
		mu.Lock()
		t.delivered([]queenside.Message{m}, at)
		mu.Unlock()
		lc.count(1, at)
		wait(ctx, b.cfg.HandlerWait)
		if lc.done() {
			stop()
		}
		return nil
	}, queenside.ConsumeOptions{
		Group: lc.group, Concurrency: b.cfg.ConsumeConcurrency,
		IgnoreSignals: true, // the bench's own Ctrl-C ends the run and prints it
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		mu.Lock()
		t.failf("consume: %v", err)
		mu.Unlock()
	}
}

// wait sleeps d, the handler's stand-in for I/O, or until ctx ends.
func wait(ctx context.Context, d time.Duration) {
	if d > 0 {
		sleep(ctx, d)
	}
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// commandConsumers starts cfg.ConsumerCommand once a consumer and waits
// until each wrote "ready" (it has connected). Each program gets
// --socket, --queue, --group, --handler-wait-ms and, when set,
// --concurrency; it consumes until SIGTERM, and writes a line a message it
// handled: "<push time> <receive time> <partition> <redelivered>", the
// times in UnixNano (the push time is the payload's first 8 bytes,
// big-endian), redelivered 0 or 1. Once finish is called and ctx ends, it
// gets SIGTERM, and must exit by itself: its consume loop's stop is part
// of what is run.
func (b *bench) commandConsumers(ctx context.Context, lc liveConsumers) (finish func() *tally, err error) {
	ts := tallies(b.cfg.MixedConsumers)
	begin := make(chan struct{}) // the lines are read into lc once finish is called
	ready := make(chan error, len(ts))
	var wg sync.WaitGroup
	for i := range ts {
		wg.Go(func() { b.commandConsumer(ctx, lc, ts[i], ready, begin) })
	}
	for range ts {
		if err := <-ready; err != nil {
			close(begin)
			wg.Wait()
			return nil, err
		}
	}
	return func() *tally {
		close(begin)
		wg.Wait()
		return newTally().merge(ts...)
	}, nil
}

// consumerExitWait is how long a consumer program gets to exit after its
// SIGTERM before it is killed; consumerReadyWait how long it gets to
// connect.
const (
	consumerExitWait  = 15 * time.Second
	consumerReadyWait = 30 * time.Second
)

func (b *bench) commandConsumer(ctx context.Context, lc liveConsumers, t *tally, ready chan<- error, begin <-chan struct{}) {
	t.partitions = map[string]struct{}{}
	fields := strings.Fields(b.cfg.ConsumerCommand)
	args := append(fields[1:], "--socket", b.socket, "--queue", lc.queue, "--group", lc.group,
		"--handler-wait-ms", strconv.FormatFloat(float64(b.cfg.HandlerWait)/float64(time.Millisecond), 'f', -1, 64))
	if b.cfg.ConsumeConcurrency > 0 {
		args = append(args, "--concurrency", strconv.Itoa(b.cfg.ConsumeConcurrency))
	}
	cmd := exec.Command(fields[0], args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		ready <- fmt.Errorf("start %s: %w", b.cfg.ConsumerCommand, err)
		return
	}
	exited := make(chan struct{})
	defer close(exited)
	readyTimer := time.AfterFunc(consumerReadyWait, func() { cmd.Process.Kill() }) //nolint:errcheck // it may have exited
	go func() {
		<-begin
		<-ctx.Done()
		cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck // as above
		select {
		case <-exited:
		case <-time.After(consumerExitWait):
			cmd.Process.Kill() //nolint:errcheck // as above
		}
	}()
	sc := bufio.NewScanner(out)
	if !sc.Scan() || sc.Text() != "ready" {
		readyTimer.Stop()
		cmd.Wait() //nolint:errcheck // what it wrote to stderr says why
		ready <- fmt.Errorf("consumer %s did not write ready", b.cfg.ConsumerCommand)
		return
	}
	readyTimer.Stop()
	ready <- nil
	<-begin
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 4 {
			t.failf("consumer wrote %q, not four fields", sc.Text())
			continue
		}
		sent, err1 := strconv.ParseInt(f[0], 10, 64)
		got, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil {
			t.failf("consumer wrote %q: times are not integers", sc.Text())
			continue
		}
		at := time.Unix(0, got)
		t.messages++
		t.lastDelivery = at
		t.delivery = append(t.delivery, at.Sub(time.Unix(0, sent)))
		t.partitions[f[2]] = struct{}{}
		if f[3] == "1" {
			t.redelivered++
		}
		lc.count(1, at)
	}
	if err := cmd.Wait(); err != nil {
		t.failf("consumer %s: %v", b.cfg.ConsumerCommand, err)
	}
}

// consumerName says in a line which consumers ran.
func (c Config) consumerName() string {
	var s string
	switch {
	case c.ConsumerCommand != "":
		s = fmt.Sprintf("%q", c.ConsumerCommand)
	case c.Consumer == ConsumerPop:
		s = fmt.Sprintf("pops of %d messages from up to %d partitions, acks carried by the next pop", c.PopBatch, c.MixedPopPartitions)
	default:
		s = "the Go client's Consume with its defaults"
	}
	if c.ConsumeConcurrency > 0 {
		s += fmt.Sprintf(", concurrency %d", c.ConsumeConcurrency)
	}
	if c.HandlerWait > 0 {
		s += fmt.Sprintf(", a handler waiting %v a message", c.HandlerWait)
	}
	return s
}
