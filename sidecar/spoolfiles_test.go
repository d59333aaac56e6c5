package sidecar

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/queenside/queenside/protocol"
)

// deadDatabase is a URL no PostgreSQL answers.
func deadDatabase(t *testing.T) string {
	return "postgres://postgres@/postgres?host=" + shortTempDir(t) + "&connect_timeout=1"
}

// spoolWhileDown runs a sidecar without a database over spoolDir, pushes
// items from..to (all must be buffered), and stops it with SIGTERM.
func spoolWhileDown(t *testing.T, spoolDir, queue string, from, to int) {
	t.Helper()
	sc := launchSidecar(t, deadDatabase(t), spoolDir)
	c := dialClient(t, sc.socket)
	buffered, failed := pushAll(t, c, queue, from, to, nil)
	if buffered != to-from || len(failed) > 0 {
		t.Fatalf("%d of %d buffered, failed calls %v", buffered, to-from, failed)
	}
	c.Close()
	sc.terminate(t)
}

func segmentFiles(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(files)
	return files
}

func TestCorruptSpoolReplaysWhatVerifiesAndQuarantinesTheRest(t *testing.T) {
	spoolDir := t.TempDir()
	spoolWhileDown(t, spoolDir, "corrupt", 0, 200)   // one segment
	spoolWhileDown(t, spoolDir, "corrupt", 200, 400) // a second one
	segs := segmentFiles(t, spoolDir)
	if len(segs) != 2 {
		t.Fatalf("segments %v, want two", segs)
	}
	// A flipped byte in the middle of the first: inside item 50's record.
	first, err := os.ReadFile(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	at := bytes.Index(first, []byte("tx-00050"))
	if at < 0 {
		t.Fatal("item 50 not found in the first segment")
	}
	first[at+5] ^= 0x01
	if err := os.WriteFile(segs[0], first, 0o600); err != nil {
		t.Fatal(err)
	}
	// A torn last record in the second: cut in the middle of it.
	st, err := os.Stat(segs[1])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(segs[1], st.Size()-40); err != nil {
		t.Fatal(err)
	}

	pg := startPrivatePostgres(t)
	sc := launchSidecar(t, pg.url, spoolDir)
	h := sc.health(t)
	if len(h.Spool.Warnings) == 0 || !strings.Contains(strings.Join(h.Spool.Warnings, " "), "quarantine") {
		t.Fatalf("health does not say a segment was quarantined: %+v", h.Spool)
	}
	sc.waitReplayed(t)
	checkStoredOnceInOrder(t, pg.pool(t), "corrupt", 400, outageParts, map[int]bool{50: true, 399: true})
	name := strings.TrimSuffix(filepath.Base(segs[0]), ".seg")
	quarantined, _ := filepath.Glob(filepath.Join(spoolDir, "quarantine", name+"*.seg"))
	if len(quarantined) != 1 {
		t.Fatalf("quarantine/ holds %v, want the corrupt segment", quarantined)
	}
	kept, err := os.ReadFile(quarantined[0])
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(kept, first) {
		t.Fatal("the quarantined segment is not the original, byte for byte")
	}
	if log := sc.logText(); !strings.Contains(log, "quarantine") || !strings.Contains(log, "torn") {
		t.Fatalf("the log does not report the quarantine and the torn tail:\n%s", log)
	}
	if h := sc.health(t); !strings.Contains(strings.Join(h.Spool.Warnings, " "), "quarantine") {
		t.Fatalf("health forgot the quarantine: %+v", h.Spool)
	}
}

func TestAdoptedSpoolIsReplayed(t *testing.T) {
	dead := t.TempDir()
	spoolWhileDown(t, dead, "adopt", 0, 300)
	pg := startPrivatePostgres(t)
	sc := launchSidecar(t, pg.url, t.TempDir())
	sc.waitReplayed(t) // migrated, so the tables exist
	for _, f := range segmentFiles(t, dead) {
		if err := os.Rename(f, filepath.Join(sc.spoolDir, "incoming", filepath.Base(f))); err != nil {
			t.Fatal(err)
		}
	}
	pool := pg.pool(t)
	waitFor(t, 60*time.Second, "the adopted records to be stored", func() bool {
		n := 0
		for p := 0; p < outageParts; p++ {
			n += len(storedMessages(t, pool, "adopt", "p"+string(rune('0'+p))))
		}
		return n >= 300
	})
	sc.waitReplayed(t)
	checkStoredOnceInOrder(t, pool, "adopt", 300, outageParts, nil)
	if h := sc.health(t); h.Status != protocol.HealthOK || h.Spool.Records != 0 {
		t.Fatalf("health after adoption: %+v", h)
	}
}
