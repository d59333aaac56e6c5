package spool

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestSealMakesActiveReadable(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	mustAppend(t, s, "a", "b")
	if segs := s.Sealed(); len(segs) != 0 {
		t.Fatalf("active segment listed as sealed: %+v", segs)
	}
	active := Segment{Seq: 1}
	if err := s.Read(active, func(Record) error { return nil }); !errors.Is(err, ErrNoSegment) {
		t.Fatalf("Read of the active segment = %v, want ErrNoSegment", err)
	}
	if err := s.Seal(); err != nil {
		t.Fatal(err)
	}
	segs := s.Sealed()
	if len(segs) != 1 || segs[0].Seq != 1 || segs[0].Records != 2 || segs[0].Bytes != fileSize(t, segPath(dir, 1)) {
		t.Fatalf("Sealed = %+v", segs)
	}
	var got []string
	if err := s.Read(segs[0], func(r Record) error { got = append(got, string(r.Data)); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Fatalf("Read = %q", got)
	}
	// Sealing with nothing new is a no-op; the next Append starts segment 2.
	if err := s.Seal(); err != nil || len(s.Sealed()) != 1 {
		t.Fatalf("second Seal: %v, %d sealed", err, len(s.Sealed()))
	}
	mustAppend(t, s, "c")
	if err := s.Seal(); err != nil {
		t.Fatal(err)
	}
	if segs := s.Sealed(); len(segs) != 2 || segs[1].Seq != 2 || segs[1].Records != 1 {
		t.Fatalf("Sealed = %+v", segs)
	}
}

func TestReadStopsAtCallbackError(t *testing.T) {
	s := open(t, t.TempDir(), Options{})
	mustAppend(t, s, five...)
	if err := s.Seal(); err != nil {
		t.Fatal(err)
	}
	stop := errors.New("stop")
	n := 0
	err := s.Read(s.Sealed()[0], func(Record) error {
		n++
		if n == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || n != 2 {
		t.Fatalf("Read = %v after %d records, want stop after 2", err, n)
	}
}

func TestMarkReplayedResumesAfterReopen(t *testing.T) {
	dir := t.TempDir()
	clk := newClock()
	s := open(t, dir, Options{Now: clk.Now})
	for _, r := range names("r", 10) {
		mustAppend(t, s, r)
	}
	recs := readAll(t, s)
	seg := s.Sealed()[0]

	if err := s.MarkReplayed(seg, recs[3].End); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.Records != 6 || !st.Oldest.Equal(recs[4].At) {
		t.Fatalf("Stats after mark = %+v, want 6 records, oldest %v", st, recs[4].At)
	}
	if got := s.Sealed()[0].Records; got != 6 {
		t.Fatalf("segment Records = %d, want 6", got)
	}
	wantRecords(t, s, names("r", 10)[4:]...)

	// Offsets that are not a record's end, or go backwards, are refused.
	for _, bad := range []int64{recs[5].End - 1, recs[2].End, seg.Bytes + 1} {
		if err := s.MarkReplayed(seg, bad); err == nil {
			t.Errorf("MarkReplayed(%d) accepted", bad)
		}
	}
	if got := s.Stats().Records; got != 6 {
		t.Fatalf("a refused mark changed Records to %d", got)
	}
	mustClose(t, s)

	s = open(t, dir, Options{})
	if rep := s.Recovery(); rep.Records != 6 {
		t.Fatalf("Recovery = %+v, want 6 records left", rep)
	}
	if st := s.Stats(); st.Records != 6 || !st.Oldest.Equal(recs[4].At) {
		t.Fatalf("Stats after reopen = %+v", st)
	}
	wantRecords(t, s, names("r", 10)[4:]...)
}

func TestRetire(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{Now: newClock().Now})
	mustAppend(t, s, "old-1", "old-2")
	if err := s.Seal(); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, s, "new")
	recs := readAll(t, s)
	segs := s.Sealed()
	first := segs[0]

	if err := s.Retire(first, 0); !errors.Is(err, ErrNotReplayed) {
		t.Fatalf("Retire before replay = %v, want ErrNotReplayed", err)
	}
	if err := s.MarkReplayed(first, recs[0].End); err != nil {
		t.Fatal(err)
	}
	if err := s.Retire(first, recs[0].End); !errors.Is(err, ErrNotReplayed) {
		t.Fatalf("Retire half replayed = %v, want ErrNotReplayed", err)
	}
	if err := s.MarkReplayed(first, recs[1].End); err != nil {
		t.Fatal(err)
	}
	before := s.Stats()
	if err := s.Retire(first, recs[1].End); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{first.Path, filepath.Join(dir, progressName(first.Seq))} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s still there after Retire", p)
		}
	}
	after := s.Stats()
	if after.Segments != before.Segments-1 || after.Bytes != before.Bytes-first.Bytes || after.Records != 1 ||
		!after.Oldest.Equal(recs[2].At) || after.Bytes != segmentBytesOnDisk(t, dir) {
		t.Fatalf("Stats after Retire = %+v (before %+v)", after, before)
	}
	if err := s.Read(first, func(Record) error { return nil }); !errors.Is(err, ErrNoSegment) {
		t.Fatalf("Read of a retired segment = %v", err)
	}
	if segs := s.Sealed(); len(segs) != 1 || segs[0].Seq != 2 {
		t.Fatalf("Sealed = %+v", segs)
	}

	// Replayed to its end by the caller's word, with no progress file
	// (the caller recorded it where a full disk cannot fail it).
	second := s.Sealed()[0]
	if err := s.Retire(second, recs[2].End); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st != (Stats{}) {
		t.Fatalf("Stats of an empty spool = %+v", st)
	}
}

func TestQuarantineRecords(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{Now: func() time.Time { return time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC) }})
	p1, err := s.Quarantine("rejected", bytesOf("bad-1", "bad-2"))
	if err != nil {
		t.Fatal(err)
	}
	p2, err := s.Quarantine("rejected", bytesOf("bad-3"))
	if err != nil {
		t.Fatal(err)
	}
	if p1 == p2 || filepath.Dir(p1) != filepath.Join(dir, quarantineDir) {
		t.Fatalf("paths %s, %s", p1, p2)
	}
	if st := s.Stats(); st.Bytes != 0 || st.Records != 0 {
		t.Fatalf("quarantine counted in Stats: %+v", st)
	}
	// A quarantine file is a valid segment: adopting it brings the records back.
	mustClose(t, s)
	other := open(t, t.TempDir(), Options{})
	seg, _, err := other.Adopt(p1)
	if err != nil {
		t.Fatal(err)
	}
	if seg.Records != 2 {
		t.Fatalf("adopted %+v", seg)
	}
	wantRecords(t, other, "bad-1", "bad-2")
}

// A segment's identity goes with its file: the same when another spool
// adopts it under another sequence, another for another segment, and
// another once a rescue has moved its records to other offsets.
func TestIdentityFollowsTheFile(t *testing.T) {
	src := open(t, t.TempDir(), Options{})
	mustAppend(t, src, five...)
	if err := src.Seal(); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, src, "other")
	if err := src.Seal(); err != nil {
		t.Fatal(err)
	}
	segs := src.Sealed()
	first, err := src.Identity(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	second, err := src.Identity(segs[1])
	if err != nil {
		t.Fatal(err)
	}
	if first == second {
		t.Fatal("two segments share an identity")
	}
	b := readFile(t, segs[0].Path)

	dst := open(t, t.TempDir(), Options{})
	mustAppend(t, dst, "a record of its own")
	if err := dst.Seal(); err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(dst.dir, incomingDir, "podB.seg")
	writeFile(t, in, b)
	adopted, _, err := dst.Adopt(in)
	if err != nil {
		t.Fatal(err)
	}
	if adopted.Seq == segs[0].Seq {
		t.Fatalf("adopted under its old sequence %d", adopted.Seq)
	}
	if id, err := dst.Identity(adopted); err != nil || id != first {
		t.Fatalf("identity after adoption %x (%v), want %x", id, err, first)
	}

	starts, _ := recordStarts(five...)
	b[starts[2]+recordHeaderSize+3] ^= 0x01
	in = filepath.Join(dst.dir, incomingDir, "podC.seg")
	writeFile(t, in, b)
	rescued, rep, err := dst.Adopt(in)
	if err != nil || len(rep.Quarantined) != 1 {
		t.Fatalf("Adopt of a damaged copy: %+v, %v", rep, err)
	}
	if id, err := dst.Identity(rescued); err != nil || id == first {
		t.Fatalf("a rescued segment keeps the identity %x of its original (%v)", id, err)
	}
}
