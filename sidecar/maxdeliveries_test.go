package sidecar

import (
	"bufio"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/pgtest"
)

// pushSequence pushes n messages to queue/partition, the i-th the string
// "m<i>", or "poison" when i is poison, with transaction ids "<tx><i>".
func pushSequence(t *testing.T, c *queenside.Client, queue, partition, tx string, n, poison int) {
	t.Helper()
	items := make([]protocol.PushItem, n)
	for i := range items {
		v := fmt.Sprintf("m%d", i)
		if i == poison {
			v = "poison"
		}
		items[i] = item(t, queue, partition, fmt.Sprintf("%s%d", tx, i), v)
	}
	mustPush(t, c, items...)
}

// maxDeliveries bounds how often a message is delivered without an ack,
// counting leases that expired, were released or ended in a failure; the
// last delivery is made alone, so that only the message at the cursor is
// dead-lettered and the ones leased with it before are not.
// Both ways a pop is served are checked: pop (one partition named) and
// pop_from (several partitions asked for).
func TestMaxDeliveriesDeadLettersOnlyTheMessageThatIsNeverAcked(t *testing.T) {
	for name, args := range map[string]protocol.PopArgs{
		"one partition": {Queue: "md", Partition: "p", Group: "g", Batch: 10},
		"any partition": {Queue: "md", Group: "g", Batch: 10, Partitions: 2},
	} {
		t.Run(name, func(t *testing.T) { checkMaxDeliveries(t, args) })
	}
}

func checkMaxDeliveries(t *testing.T, args protocol.PopArgs) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	ctx := testContext(t)

	got, err := c.Configure(ctx, "md", func() protocol.QueueOptions {
		o := protocol.DefaultQueueOptions()
		o.MaxDeliveries = 3
		return o
	}())
	if err != nil || got.MaxDeliveries != 3 {
		t.Fatalf("configure maxDeliveries 3: %+v %v", got, err)
	}
	if qs, err := c.Queues(ctx); err != nil || qs[0].Options.MaxDeliveries != 3 {
		t.Fatalf("queues: %+v %v", qs, err)
	}
	pushSequence(t, c, "md", "p", "a", 10, 3)
	pop := func() protocol.PopResult { return mustPop(t, c, args) }
	release := func(res protocol.PopResult) {
		if _, err := c.Release(ctx, res.Leases[0].LeaseID); err != nil {
			t.Fatal(err)
		}
	}
	span := func(res protocol.PopResult) string {
		l := res.Leases[0]
		return fmt.Sprintf("%d..%d #%d", l.FromOffset, l.ToOffset, l.HeadAttempts)
	}

	// 0..2 are acked one by one; then the consumer gives up at 3.
	first := pop()
	if s := span(first); s != "0..9 #1" {
		t.Fatalf("first lease %s", s)
	}
	mustAck(t, c, queenside.Completed(first.Messages[0]), queenside.Completed(first.Messages[1]), queenside.Completed(first.Messages[2]))
	release(first)
	second := pop()
	if s := span(second); s != "3..9 #2" {
		t.Fatalf("second lease %s, want 3..9 #2", s)
	}
	// A failure counts as a delivery that was not acked (and against the
	// retry budget, 3, which is not used up).
	if r := mustAck(t, c, queenside.Failed(second.Messages[0], "boom")); !r.Results[0].Success || r.Results[0].DeadLettered {
		t.Fatalf("nack: %+v", r)
	}
	// Its last delivery: alone.
	third := pop()
	if s := span(third); s != "3..3 #3" || len(third.Messages) != 1 {
		t.Fatalf("third lease %s with %d messages, want 3..3 #3 alone", s, len(third.Messages))
	}
	release(third)

	// The next pop dead-letters 3 and goes on: 4..9, each delivered twice
	// already, have one delivery left, so each comes alone, in order.
	var after []int64
	for len(after) < 6 {
		res := pop()
		if len(res.Messages) != 1 || !res.Messages[0].Redelivered {
			t.Fatalf("after the dead letter: %+v, want one redelivered message a lease", res.Messages)
		}
		after = append(after, res.Messages[0].Offset)
		mustAck(t, c, queenside.Completed(res.Messages[0]))
	}
	if !slices.Equal(after, []int64{4, 5, 6, 7, 8, 9}) {
		t.Fatalf("delivered after the dead letter: %v", after)
	}
	dl, err := c.DLQ(ctx, queenside.DLQArgs{Queue: "md"})
	if err != nil || len(dl.Entries) != 1 {
		t.Fatalf("dead letters: %+v %v", dl, err)
	}
	e := dl.Entries[0]
	if e.Offset != 3 || e.Group != "g" || e.Failures != 1 || e.Error != "delivered 3 times under a lease without being acked (maxDeliveries 3)" {
		t.Fatalf("dead letter: %+v", e)
	}
	// New messages come in batches again.
	pushSequence(t, c, "md", "p", "b", 5, -1)
	if s := span(pop()); s != "10..14 #1" {
		t.Fatalf("a new batch: %s", s)
	}

	// A dead letter of maxDeliveries is replayed as any other.
	if r, err := c.DLQReplay(ctx, e.ID); err != nil || r[0].Status != protocol.StatusQueued {
		t.Fatalf("replay: %+v %v", r, err)
	}
}

// Without maxDeliveries (0, the default) a crash charges nothing: a
// message is delivered again however many leases ended without an ack,
// always with its whole span. An auto-acked pop that reaches a message
// whose deliveries are used up dead-letters it too.
func TestMaxDeliveriesOffKeepsDeliveringAndAutoAckSheds(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	ctx := testContext(t)
	pushSequence(t, c, "off", "p", "a", 4, -1)
	for i := 1; i <= 6; i++ {
		res := mustPop(t, c, protocol.PopArgs{Queue: "off", Partition: "p", Group: "g", Batch: 10})
		if l := res.Leases[0]; l.FromOffset != 0 || l.ToOffset != 3 || l.HeadAttempts != i {
			t.Fatalf("delivery %d: %+v", i, l)
		}
		if _, err := c.Release(ctx, res.Leases[0].LeaseID); err != nil {
			t.Fatal(err)
		}
	}
	if dl, _ := c.DLQ(ctx, queenside.DLQArgs{Queue: "off"}); len(dl.Entries) != 0 {
		t.Fatalf("dead letters without maxDeliveries: %+v", dl.Entries)
	}
	// Turned on at 2 with six deliveries behind: the next pop, auto-acked,
	// sheds 0 and every message delivered as often since, and delivers
	// what is left.
	configure(t, c, "off", func(o *protocol.QueueOptions) { o.MaxDeliveries = 2 })
	got := drain(t, c, "off", "g")
	dl, err := c.DLQ(ctx, queenside.DLQArgs{Queue: "off"})
	if err != nil || len(got) != 0 || len(dl.Entries) != 4 {
		t.Fatalf("auto-acked after maxDeliveries 2: delivered %v, dead letters %+v %v", offsets(got), dl.Entries, err)
	}

	opts := protocol.DefaultQueueOptions()
	opts.MaxDeliveries = 1001
	if _, err := c.Configure(ctx, "off", opts); !isCode(err, protocol.CodeInvalidArgument) {
		t.Fatalf("maxDeliveries 1001: %v, want invalid_argument", err)
	}
}

// The case, with real processes: a consumer (the Go client's
// Consume loop, acking each batch) is killed mid-batch on the same message
// every time. With maxDeliveries 3 the message is dead-lettered after the
// third kill, and every other message is handled, in order; the only
// repeats are of messages that were leased to a killed consumer and not
// acked, as the seed allows.
func TestMaxDeliveriesEndsAConsumerCrashLoop(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	p := startServe(t, dbURL)
	c := dialClient(t, p.socket)
	ctx := testContext(t)
	configure(t, c, "crash", func(o *protocol.QueueOptions) { o.MaxDeliveries = 3; o.LeaseSeconds = 1 })
	const n, poison = 20, 5
	pushSequence(t, c, "crash", "p", "a", n, poison)
	consumer := buildTestProgram(t, "./testdata/crashconsumer")

	var handled []int64 // in the order the consumers handled them
	kills := 0
	for {
		cmd := exec.Command(consumer, p.socket, "crash", "g")
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(lines)
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- sc.Text()
			}
		}()
		finished := false
		for !finished {
			select {
			case line, ok := <-lines:
				if !ok {
					t.Fatalf("the consumer exited: %s", stderr.String())
				}
				var off int64
				if _, err := fmt.Sscanf(line, "poison %d", &off); err == nil {
					if off != poison {
						t.Fatalf("poison at %d", off)
					}
					cmd.Process.Signal(syscall.SIGKILL) //nolint:errcheck // a crash
					kills++
					finished = true
					continue
				}
				if _, err := fmt.Sscanf(line, "%d", &off); err != nil {
					t.Fatalf("consumer said %q", line)
				}
				handled = append(handled, off)
				finished = off == n-1
			case <-time.After(30 * time.Second):
				t.Fatalf("the consumer went quiet after %v (%d kills)", handled, kills)
			}
		}
		if kills == 0 || handled[len(handled)-1] != n-1 {
			cmd.Wait() //nolint:errcheck // killed
			wg.Wait()
			if kills > 10 {
				t.Fatalf("%d kills and the poison is still delivered", kills)
			}
			continue
		}
		// The last message was handled: let its ack land, then stop.
		waitFor(t, 10*time.Second, "the group to have acked everything", func() bool {
			st, err := c.Stats(ctx, "crash")
			return err == nil && st.Partitions[0].Groups[0].Lag == 0
		})
		cmd.Process.Signal(syscall.SIGKILL) //nolint:errcheck // done
		cmd.Wait()                          //nolint:errcheck // killed
		wg.Wait()
		break
	}
	if kills != 3 {
		t.Fatalf("%d kills, want maxDeliveries = 3", kills)
	}
	dl, err := c.DLQ(ctx, queenside.DLQArgs{Queue: "crash"})
	if err != nil || len(dl.Entries) != 1 || dl.Entries[0].Offset != poison ||
		!strings.Contains(dl.Entries[0].Error, "delivered 3 times") {
		t.Fatalf("dead letters: %+v %v", dl.Entries, err)
	}
	// Every message but the poison was handled, first in offset order;
	// after the last kill, each once, in order.
	seen := map[int64]int{}
	var firsts []int64
	for _, off := range handled {
		if seen[off] == 0 {
			firsts = append(firsts, off)
		}
		seen[off]++
	}
	want := []int64{}
	for i := range int64(n) {
		if i != poison {
			want = append(want, i)
		}
	}
	if !slices.Equal(firsts, want) {
		t.Fatalf("handled first in the order %v, want %v", firsts, want)
	}
	for off, times := range seen {
		if off > poison && times != 1 || off < poison && times > 3 {
			t.Fatalf("offset %d handled %d times (all: %v)", off, times, handled)
		}
	}
	t.Logf("handled %v; %d kills", handled, kills)
}

var (
	programsMu sync.Mutex
	programs   = map[string]string{}
)

// buildTestProgram builds the program in dir (relative to this package)
// once per test run.
func buildTestProgram(t *testing.T, dir string) string {
	t.Helper()
	programsMu.Lock()
	defer programsMu.Unlock()
	if bin, ok := programs[dir]; ok {
		return bin
	}
	bin := filepath.Join(t.TempDir(), filepath.Base(dir))
	if out, err := exec.Command("go", "build", "-o", bin, dir).CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", dir, err, out)
	}
	programs[dir] = bin
	return bin
}
