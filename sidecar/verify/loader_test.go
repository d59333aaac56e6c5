package verify

import (
	"context"
	"testing"
	"time"
)

// TestLoaderHeld: the loader pushes past --duration, at its rate, while a
// fault still needs the traffic, and stops at --duration otherwise.
func TestLoaderHeld(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Rate, cfg.Duration, cfg.Partitions = 200, time.Second, 10
	for _, held := range []bool{false, true} {
		start := time.Now()
		l := newLoader("q", cfg, []*sidecar{{}}, start, newTimeline(start, time.Second))
		hold := make(chan struct{})
		l.hold = hold
		if !held {
			close(hold)
		}
		ended := make(chan struct{})
		go func() { l.generate(context.Background()); close(ended) }()
		time.Sleep(1500 * time.Millisecond)
		if l.hasEnded() == held {
			t.Fatalf("held %v: ended %v at 1.5 s of a 1 s run", held, l.hasEnded())
		}
		if held {
			close(hold)
		}
		<-ended
		queued := int64(len(l.producers[0].pending))
		switch {
		case !held && l.events() != cfg.Events():
			t.Errorf("not held: %d events, want %d", l.events(), cfg.Events())
		case held && l.events() < cfg.Events()+50:
			t.Errorf("held for 0.5 s past the end: %d events, want about %d", l.events(), cfg.Events()+100)
		case queued != l.events():
			t.Errorf("%d events generated, %d handed to the producer", l.events(), queued)
		case held && l.extension(cfg.Duration) == "" || !held && l.extension(cfg.Duration) != "":
			t.Errorf("held %v: extension %q", held, l.extension(cfg.Duration))
		}
	}
}
