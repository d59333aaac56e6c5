package queenside_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar"
)

// items of one queue whose payloads add up to about size bytes.
func bulky(t *testing.T, n, size int) []queenside.PushItem {
	t.Helper()
	items := make([]queenside.PushItem, n)
	for i := range items {
		it, err := queenside.Item("frames", strings.Repeat("x", size/n))
		if err != nil {
			t.Fatal(err)
		}
		items[i] = it
	}
	return items
}

// A request above the sidecar's frame limit is refused before it is sent,
// with frame_too_large, the sizes and the flag; the connection, and the
// calls on it, go on.
func TestARequestAboveTheFrameLimitIsRefusedBeforeItIsSent(t *testing.T) {
	const limit = 256 << 10
	c := dial(t, startSidecarWith(t, sidecar.Options{MaxFrameBytes: limit}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.Push(ctx, bulky(t, 4, 300<<10)...)
	var qe *queenside.Error
	if !errors.As(err, &qe) || qe.Code != protocol.CodeFrameTooLarge || qe.Details["local"] != true ||
		qe.Details["maxFrameBytes"] != int64(limit) || !strings.Contains(qe.Message, "--max-frame-bytes") {
		t.Fatalf("push above the limit: %v %+v", err, qe)
	}
	if c.MaxFrameBytes() != limit {
		t.Fatalf("the client learnt a limit of %d, want %d", c.MaxFrameBytes(), limit)
	}
	if res, err := c.Push(ctx, bulky(t, 1, 100)...); err != nil || res[0].Status != protocol.StatusQueued {
		t.Fatalf("a push after the refusal: %+v %v", res, err)
	}
	t.Logf("refused: %v", err)
}

// A request the client could not hold against the limit (too small to ask
// hello for it, above a sidecar's tiny one): the sidecar refuses the frame
// and closes the connection, and the call reports its answer, not a broken
// socket.
func TestTheSidecarsRefusalOfAFrameIsReported(t *testing.T) {
	c := dial(t, startSidecarWith(t, sidecar.Options{MaxFrameBytes: 4096}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.Push(ctx, bulky(t, 1, 20<<10)...)
	var qe *queenside.Error
	if !errors.As(err, &qe) || qe.Code != protocol.CodeFrameTooLarge || !strings.Contains(qe.Message, "--max-frame-bytes") {
		t.Fatalf("push above a tiny limit: %v; want the sidecar's frame_too_large", err)
	}
	t.Logf("reported: %v", err)
}
