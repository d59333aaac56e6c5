package spool

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestAppendReopenRead(t *testing.T) {
	dir := t.TempDir()
	clk := newClock()
	s := open(t, dir, Options{Now: clk.Now})
	mustAppend(t, s, "a", "b", "c")
	mustAppend(t, s, "d")
	if got := s.Stats(); got.Records != 4 || got.Segments != 1 || got.Bytes != segmentBytesOnDisk(t, dir) {
		t.Fatalf("Stats before close = %+v, %d bytes on disk", got, segmentBytesOnDisk(t, dir))
	}
	mustClose(t, s)

	s = open(t, dir, Options{})
	rep := s.Recovery()
	if rep.Segments != 1 || rep.Records != 4 || len(rep.TornTails) != 0 || len(rep.Quarantined) != 0 {
		t.Fatalf("Recovery = %+v", rep)
	}
	recs := readAll(t, s)
	if got := strings.Join(dataOf(recs), ","); got != "a,b,c,d" {
		t.Fatalf("records = %s", got)
	}
	// One append time per Append call, from Options.Now, to the nanosecond.
	first := time.Date(2026, 1, 2, 3, 4, 6, 6, time.UTC) // the clock's first tick
	if !recs[0].At.Equal(first) || !recs[1].At.Equal(first) || !recs[2].At.Equal(first) || !recs[3].At.After(first) {
		t.Errorf("append times = %v %v %v %v", recs[0].At, recs[1].At, recs[2].At, recs[3].At)
	}
	st := s.Stats()
	if st.Records != 4 || st.Segments != 1 || !st.Oldest.Equal(first) || st.Bytes != segmentBytesOnDisk(t, dir) {
		t.Fatalf("Stats after reopen = %+v", st)
	}
	_, end := recordStarts("a", "b", "c", "d")
	if recs[3].End != end {
		t.Errorf("last End = %d, want %d", recs[3].End, end)
	}
}

func TestAppendGoesToFreshSegmentAfterOpen(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	mustAppend(t, s, "old")
	mustClose(t, s)
	before := readFile(t, segPath(dir, 1))

	s = open(t, dir, Options{})
	mustAppend(t, s, "new")
	if string(readFile(t, segPath(dir, 1))) != string(before) {
		t.Fatal("a segment found at Open was written again")
	}
	if fileSize(t, segPath(dir, 2)) == 0 {
		t.Fatal("no new segment for the first Append after Open")
	}
	wantRecords(t, s, "old", "new")
}

func TestGroupCommit(t *testing.T) {
	dir := t.TempDir()
	ffs := newFaultFS()
	// A slow fsync, as on a real disk: Appends arriving meanwhile must
	// share the next one.
	ffs.syncDelay = 2 * time.Millisecond
	s := open(t, dir, Options{FS: ffs})

	const writers, each = 8, 40
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if err := s.Append(bytesOf(fmt.Sprintf("w%d-%d", w, i))); err != nil {
					t.Errorf("Append: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()

	syncs := ffs.syncs()
	if syncs == 0 || syncs >= writers*each {
		t.Fatalf("%d fsyncs for %d Appends: no group commit", syncs, writers*each)
	}
	t.Logf("%d Appends, %d fsyncs", writers*each, syncs)

	// Every record back, each writer's in the order it appended them.
	next := make([]int, writers)
	for _, d := range dataOf(readAll(t, s)) {
		var w, i int
		if _, err := fmt.Sscanf(d, "w%d-%d", &w, &i); err != nil {
			t.Fatalf("record %q: %v", d, err)
		}
		if i != next[w] {
			t.Fatalf("writer %d: record %d where %d was due", w, i, next[w])
		}
		next[w]++
	}
	for w, n := range next {
		if n != each {
			t.Errorf("writer %d: %d records back, want %d", w, n, each)
		}
	}
}

func TestRotation(t *testing.T) {
	dir := t.TempDir()
	const segBytes = 200
	s := open(t, dir, Options{SegmentBytes: segBytes})
	var want []string
	for i := range 30 {
		r := fmt.Sprintf("record-%02d", i) // 9 bytes, 25 on disk
		mustAppend(t, s, r)
		want = append(want, r)
	}
	big := strings.Repeat("x", 500) // larger than a segment: one of its own
	mustAppend(t, s, big)
	want = append(want, big)
	mustAppend(t, s, "after")
	want = append(want, "after")

	wantRecords(t, s, want...)
	segs := s.Sealed()
	if len(segs) < 5 {
		t.Fatalf("%d segments, want rotation", len(segs))
	}
	for _, seg := range segs {
		if seg.Bytes > segBytes && seg.Records != 1 {
			t.Errorf("%s: %d bytes with %d records, over SegmentBytes", seg.Path, seg.Bytes, seg.Records)
		}
		if seg.Bytes != fileSize(t, seg.Path) {
			t.Errorf("%s: Bytes %d, file %d", seg.Path, seg.Bytes, fileSize(t, seg.Path))
		}
	}
	if got, onDisk := s.Stats().Bytes, segmentBytesOnDisk(t, dir); got != onDisk {
		t.Errorf("Stats.Bytes = %d, on disk %d", got, onDisk)
	}
}

func TestAppendRefusesBadRecordSizes(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	if err := s.Append([][]byte{[]byte("ok"), {}}); !errors.Is(err, ErrRecordSize) {
		t.Fatalf("empty record: %v, want ErrRecordSize", err)
	}
	if err := s.Append([][]byte{make([]byte, MaxRecordBytes+1)}); !errors.Is(err, ErrRecordSize) {
		t.Fatalf("oversize record: %v, want ErrRecordSize", err)
	}
	if st := s.Stats(); st.Records != 0 || st.Bytes != 0 {
		t.Fatalf("a refused Append wrote something: %+v", st)
	}
	if err := s.Append(nil); err != nil {
		t.Fatalf("empty batch: %v", err)
	}
}

func TestClosedSpool(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	mustAppend(t, s, "a")
	if err := s.Seal(); err != nil {
		t.Fatal(err)
	}
	seg := s.Sealed()[0]
	mustClose(t, s)
	calls := map[string]error{
		"Append":       s.Append(bytesOf("b")),
		"Seal":         s.Seal(),
		"Read":         s.Read(seg, func(Record) error { return nil }),
		"MarkReplayed": s.MarkReplayed(seg, seg.Bytes),
		"Retire":       s.Retire(seg, seg.Bytes),
		"Close":        s.Close(),
	}
	_, quarantineErr := s.Quarantine("x", bytesOf("y"))
	calls["Quarantine"] = quarantineErr
	_, _, adoptErr := s.Adopt(seg.Path)
	calls["Adopt"] = adoptErr
	calls["WatchIncoming"] = s.WatchIncoming(t.Context(), nil)
	for name, err := range calls {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
}

func TestCloseAnswersPendingAppends(t *testing.T) {
	dir := t.TempDir()
	ffs := newFaultFS()
	ffs.syncDelay = 5 * time.Millisecond
	s := open(t, dir, Options{FS: ffs})
	var wg sync.WaitGroup
	var mu sync.Mutex
	acked := map[string]bool{}
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := strconv.Itoa(i)
			err := s.Append(bytesOf(r))
			if err == nil {
				mu.Lock()
				acked[r] = true
				mu.Unlock()
			} else if !errors.Is(err, ErrClosed) {
				t.Errorf("Append: %v", err)
			}
		}()
	}
	time.Sleep(3 * time.Millisecond)
	mustClose(t, s)
	wg.Wait()

	// Every Append that returned nil is on disk; no other record is.
	s = open(t, dir, Options{})
	got := dataOf(readAll(t, s))
	if len(got) != len(acked) {
		t.Fatalf("%d records on disk, %d acknowledged", len(got), len(acked))
	}
	for _, r := range got {
		if !acked[r] {
			t.Errorf("record %s on disk but its Append failed", r)
		}
	}
}
