package janitor

import (
	"fmt"
	"testing"
	"time"

	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/store"
)

// Two sidecars' janitors on one database: while one works a round, the
// other skips its own, deleting nothing; the lock is free again after.
func TestOneJanitorWorksAtATime(t *testing.T) {
	f := newFixture(t, options(func(o *protocol.QueueOptions) { o.RetentionSeconds = 60 }))
	for i := range 5 {
		f.push("p", fmt.Sprintf("s%d", i), 2)
	}
	f.backdate(2 * time.Minute)
	// The other sidecar: its own store, so its own connections. Its rounds
	// are slow on purpose: a segment per batch, and a long pause.
	other := New(openStore(t, f.url), Options{Budget: store.Budget{Segments: 1, Messages: 1}, Pause: 300 * time.Millisecond})

	sess, ok, err := f.st.LockRetention(f.ctx)
	if err != nil || !ok {
		t.Fatalf("lock: %v %v", ok, err)
	}
	if r, err := other.Round(f.ctx); err != nil || !r.Skipped {
		t.Fatalf("round while the lock is held: %+v %v; want skipped", r, err)
	}
	if got := f.retained("p"); len(got) != 5 {
		t.Fatalf("a skipped round deleted: %v left", got)
	}
	sess.Close()

	type result struct {
		r   Round
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := other.Round(f.ctx)
		done <- result{r, err}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for len(f.retained("p")) == 5 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if left := len(f.retained("p")); left == 5 || left == 0 {
		t.Fatalf("%d segments left: the slow round is not under way", left)
	}
	if r, err := f.j.Round(f.ctx); err != nil || !r.Skipped {
		t.Fatalf("a round during another's: %+v %v; want skipped", r, err)
	}
	res := <-done
	if res.err != nil || res.r.Skipped || res.r.Segments != 5 {
		t.Fatalf("the slow round: %+v %v; want all 5 segments", res.r, res.err)
	}
	if r := f.round(); r.Segments != 0 {
		t.Fatalf("the next round deleted %d segments again", r.Segments)
	}
	// A round gives the lock back as it ends, before its session closes.
	held := func() int64 {
		return f.count("SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database WHERE l.locktype = 'advisory' AND d.datname = current_database()")
	}
	if n := held(); n != 0 {
		t.Fatalf("%d advisory locks still held between rounds", n)
	}
}
