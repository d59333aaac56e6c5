package spool

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// dropIncoming puts b into dir's incoming/ the way README.md tells an
// operator to: under a name not ending in ".seg", then renamed. The file
// is dated in the past so it need not settle.
func dropIncoming(t *testing.T, dir, name string, b []byte) string {
	t.Helper()
	part := filepath.Join(dir, incomingDir, name+".part")
	writeFile(t, part, b)
	old := time.Now().Add(-time.Minute)
	if err := os.Chtimes(part, old, old); err != nil {
		t.Fatal(err)
	}
	final := filepath.Join(dir, incomingDir, name)
	if err := os.Rename(part, final); err != nil {
		t.Fatal(err)
	}
	return final
}

// watch runs WatchIncoming until the test ends and passes on what it adopts.
func watch(t *testing.T, s *Spool) <-chan Segment {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	adopted := make(chan Segment, 16)
	done := make(chan error, 1)
	go func() { done <- s.WatchIncoming(ctx, func(seg Segment, _ Recovery) { adopted <- seg }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("WatchIncoming: %v", err)
		}
	})
	return adopted
}

func waitAdopted(t *testing.T, adopted <-chan Segment) Segment {
	t.Helper()
	select {
	case seg := <-adopted:
		return seg
	case <-time.After(10 * time.Second):
		t.Fatal("nothing adopted")
		return Segment{}
	}
}

// waitFor polls cond until it holds or the time is up.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestWatchIncomingAdoptsSegmentFromAnotherSpool(t *testing.T) {
	donor := writeSegment(t, filepath.Join(t.TempDir(), "dead-pod"), "dead-1", "dead-2")

	dir := t.TempDir()
	s := open(t, dir, Options{})
	mustAppend(t, s, "mine")
	if err := s.Seal(); err != nil {
		t.Fatal(err)
	}
	adopted := watch(t, s)
	in := dropIncoming(t, dir, "podA-00000000000000000001.seg", readFile(t, donor))

	seg := waitAdopted(t, adopted)
	if seg.Seq <= 1 || seg.Records != 2 || seg.Path != segPath(dir, seg.Seq) {
		t.Fatalf("adopted %+v", seg)
	}
	if _, err := os.Stat(in); !os.IsNotExist(err) {
		t.Fatal("adopted file still in incoming/")
	}
	if st := s.Stats(); st.Records != 3 || st.Segments != 2 || st.Bytes != segmentBytesOnDisk(t, dir) {
		t.Fatalf("Stats = %+v", st)
	}
	// The newest sealed segment, after the spool's own.
	wantRecords(t, s, "mine", "dead-1", "dead-2")
}

func TestWatchIncomingQuarantinesNonSegment(t *testing.T) {
	dir := t.TempDir()
	log, logs := newLogger()
	s := open(t, dir, Options{Logger: log})
	junk := []byte("this is not a segment at all, whatever its name")
	dropIncoming(t, dir, "junk.seg", junk)
	adopted := watch(t, s)

	// The error is logged just after the file is moved: wait for both.
	waitFor(t, "junk in quarantine, and logged", func() bool {
		return len(quarantined(t, dir, segExt)) == 1 && strings.Contains(logs.String(), "[ERROR]")
	})
	if q := quarantined(t, dir, segExt)[0]; !bytes.Equal(readFile(t, q), junk) || !strings.Contains(filepath.Base(q), "junk") {
		t.Fatalf("quarantined %s differs from the file dropped in", q)
	}
	if got := listDir(t, filepath.Join(dir, incomingDir)); len(got) != 0 {
		t.Fatalf("incoming/ still holds %v", got)
	}
	if !strings.Contains(logs.String(), "junk.seg") {
		t.Errorf("the error does not name the file:\n%s", logs)
	}
	select {
	case seg := <-adopted:
		t.Fatalf("junk adopted as %+v", seg)
	default:
	}
	if st := s.Stats(); st.Segments != 0 || st.Bytes != 0 {
		t.Fatalf("Stats = %+v", st)
	}
}

func TestWatchIncomingIgnoresOtherNamesAndWaitsForSettle(t *testing.T) {
	donor := writeSegment(t, filepath.Join(t.TempDir(), "dead-pod"), "dead-1")
	dir := t.TempDir()
	s := open(t, dir, Options{})
	part := filepath.Join(dir, incomingDir, "copying.seg.part")
	writeFile(t, part, readFile(t, donor))
	fresh := filepath.Join(dir, incomingDir, "fresh.seg")
	writeFile(t, fresh, readFile(t, donor)) // modified just now

	wait, err := s.adoptIncoming(nil, map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	if wait <= 0 || wait > incomingSettle {
		t.Fatalf("settle wait = %v", wait)
	}
	if got := listDir(t, filepath.Join(dir, incomingDir)); len(got) != 2 {
		t.Fatalf("incoming/ = %v: a fresh file or a non-.seg name was taken", got)
	}

	adopted := watch(t, s)
	seg := waitAdopted(t, adopted)
	if seg.Records != 1 {
		t.Fatalf("adopted %+v", seg)
	}
	if got := listDir(t, filepath.Join(dir, incomingDir)); len(got) != 1 || got[0] != "copying.seg.part" {
		t.Fatalf("incoming/ = %v, want only the .part file left", got)
	}
}

func TestWatchIncomingAdoptsInNameOrder(t *testing.T) {
	dead := filepath.Join(t.TempDir(), "dead-pod")
	s := open(t, dead, Options{})
	mustAppend(t, s, "first")
	if err := s.Seal(); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, s, "second")
	mustClose(t, s)

	dir := t.TempDir()
	s = open(t, dir, Options{})
	// Both there before the watch starts; the later one is dropped first.
	dropIncoming(t, dir, "podA-00000000000000000002.seg", readFile(t, segPath(dead, 2)))
	dropIncoming(t, dir, "podA-00000000000000000001.seg", readFile(t, segPath(dead, 1)))
	adopted := watch(t, s)
	a, b := waitAdopted(t, adopted), waitAdopted(t, adopted)
	if a.Seq >= b.Seq {
		t.Fatalf("adopted out of order: %+v then %+v", a, b)
	}
	wantRecords(t, s, "first", "second")
}

func TestAdoptRescuesDamagedSegment(t *testing.T) {
	donor := writeSegment(t, filepath.Join(t.TempDir(), "dead-pod"), five...)
	starts, _ := recordStarts(five...)
	b := readFile(t, donor)
	b[starts[1]+recordHeaderSize] ^= 0x10

	dir := t.TempDir()
	s := open(t, dir, Options{})
	in := filepath.Join(dir, incomingDir, "podB.seg")
	writeFile(t, in, b)
	seg, rep, err := s.Adopt(in)
	if err != nil {
		t.Fatal(err)
	}
	if seg.Records != 4 || rep.Records != 4 || len(rep.Quarantined) != 1 {
		t.Fatalf("Adopt = %+v, %+v", seg, rep)
	}
	// The damage is reported: record-1, its data as it now reads.
	if len(rep.Damaged) != 1 || rep.Damaged[0].Quarantined != rep.Quarantined[0] || rep.Damaged[0].Offset != starts[1] ||
		rep.Damaged[0].Bytes != recordHeaderSize+int64(len(five[1])) || !bytes.Equal(rep.Damaged[0].Data, b[starts[1]+recordHeaderSize:starts[2]]) {
		t.Fatalf("Damaged = %+v, want record-1's stretch", rep.Damaged)
	}
	if !bytes.Equal(readFile(t, rep.Quarantined[0]), b) || !strings.Contains(rep.Quarantined[0], "podB") {
		t.Fatalf("quarantined %s is not the damaged original", rep.Quarantined[0])
	}
	wantRecords(t, s, "record-0", "record-2", "record-3", "record-4")

	// The spool's own segments cannot be adopted again.
	if _, _, err := s.Adopt(seg.Path); err == nil {
		t.Fatal("Adopt of a file in the spool directory accepted")
	}
}
