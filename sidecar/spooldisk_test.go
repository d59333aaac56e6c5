package sidecar

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/queenside/queenside/protocol"
)

// mountSmallVolume mounts a tmpfs of size bytes at a new directory for the
// test, or skips it where none can be mounted (without root).
func mountSmallVolume(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Skipf("a tmpfs cannot be mounted here (%v): run as root", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// fillVolume writes path until its filesystem has no room left.
func fillVolume(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); errors.Is(err, syscall.ENOSPC) {
			return
		} else if err != nil {
			t.Fatal(err)
		}
	}
}

// A spool whose volume fills during an outage: the pushes it cannot take
// fail unavailable, saying so; once PostgreSQL is back the replay goes on
// with the volume still full, through a SIGKILL and a start on the full
// volume, and every buffered push is stored once, in order, on a queue
// without deduplication as on one with it.
func TestFullSpoolVolumeStoresEachBufferedPushOnce(t *testing.T) {
	volume := mountSmallVolume(t, "16m")
	spoolDir := filepath.Join(volume, "spool")
	pg := startPrivatePostgres(t)
	sc := launchSidecar(t, pg.url, spoolDir)
	sc.waitReplayed(t)
	c := dialClient(t, sc.socket)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts := protocol.DefaultQueueOptions()
	opts.DedupWindowSeconds = 0
	if _, err := c.Configure(ctx, "nodedup", opts); err != nil {
		t.Fatal(err)
	}

	const total = 3000
	pg.stop(t)
	for _, queue := range []string{"nodedup", "dedup"} {
		if buffered, failed := pushAll(t, c, queue, 0, total, nil); buffered != total || len(failed) > 0 {
			t.Fatalf("%s: %d of %d buffered, calls failed at %v", queue, buffered, total, failed)
		}
	}
	fillVolume(t, filepath.Join(volume, "filler"))
	// More than the segment's last page holds (a tmpfs page is 4 KiB).
	res, err := c.Push(ctx, numbered(t, "nodedup", total, outageBatch, outageParts)...)
	if err != nil {
		t.Fatal(err)
	}
	if r := res[0]; r.Status != protocol.StatusFailed || r.Error == nil || r.Error.Code != protocol.CodeUnavailable ||
		!strings.Contains(r.Error.Message, "no space left on device") {
		t.Fatalf("a push the full volume cannot take: %s %+v", r.Status, r.Error)
	}
	if h := sc.health(t); !strings.Contains(strings.Join(h.Spool.Warnings, "; "), "the spool's disk refuses writes") {
		t.Fatalf("health on a full spool volume: %+v", h.Spool)
	}

	pg.restart(t)
	waitFor(t, 30*time.Second, "the replay to start", func() bool {
		h := sc.health(t)
		return h.Spool.Records < 2*total
	})
	sc.kill(t)
	sc = launchSidecar(t, pg.url, spoolDir) // on the volume, still full
	sc.waitReplayed(t)
	if err := os.Remove(filepath.Join(volume, "filler")); err != nil {
		t.Fatal(err)
	}
	for _, queue := range []string{"nodedup", "dedup"} {
		checkStoredOnceInOrder(t, pg.pool(t), queue, total, outageParts, nil)
	}
}
