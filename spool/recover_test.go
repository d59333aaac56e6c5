package spool

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var five = []string{"record-0", "record-1", "record-2", "record-3", "record-4"}

// quarantined returns the files in dir/quarantine with the given suffix.
func quarantined(t *testing.T, dir, suffix string) []string {
	t.Helper()
	var out []string
	for _, name := range listDir(t, filepath.Join(dir, quarantineDir)) {
		if strings.HasSuffix(name, suffix) {
			out = append(out, filepath.Join(dir, quarantineDir, name))
		}
	}
	return out
}

func TestTornTailMidRecord(t *testing.T) {
	dir := t.TempDir()
	path := writeSegment(t, dir, five...)
	starts, _ := recordStarts(five...)
	orig := readFile(t, path)
	cut := starts[4] + 10 // the last record lost its end in a crash
	if err := os.Truncate(path, cut); err != nil {
		t.Fatal(err)
	}

	log, logs := newLogger()
	s := open(t, dir, Options{Logger: log})
	rep := s.Recovery()
	if len(rep.TornTails) != 1 || rep.TornTails[0] != path || len(rep.Quarantined) != 0 {
		t.Fatalf("Recovery = %+v", rep)
	}
	if got := fileSize(t, path); got != starts[4] {
		t.Fatalf("segment is %d bytes, want it cut to %d", got, starts[4])
	}
	if !strings.Contains(logs.String(), "torn tail") {
		t.Errorf("torn tail not logged:\n%s", logs)
	}
	// The cut bytes are kept, in case they were not a crash's last write.
	copies := quarantined(t, dir, tornExt)
	if len(copies) != 1 || !bytes.Equal(readFile(t, copies[0]), orig[starts[4]:cut]) {
		t.Fatalf("torn tail copies = %v", copies)
	}
	wantRecords(t, s, five[:4]...)
}

func TestTornTailZeroFilled(t *testing.T) {
	dir := t.TempDir()
	path := writeSegment(t, dir, five...)
	_, end := recordStarts(five...)
	// A crash after the file grew but before its blocks were written.
	writeFile(t, path, append(readFile(t, path), make([]byte, 4096)...))

	s := open(t, dir, Options{})
	if rep := s.Recovery(); len(rep.TornTails) != 1 || len(rep.Quarantined) != 0 {
		t.Fatalf("Recovery = %+v", rep)
	}
	if got := fileSize(t, path); got != end {
		t.Fatalf("segment is %d bytes, want %d", got, end)
	}
	if copies := quarantined(t, dir, tornExt); len(copies) != 0 {
		t.Fatalf("zeros copied to quarantine: %v", copies)
	}
	wantRecords(t, s, five...)
}

// A complete last record whose CRC fails, followed by zeros, is the last
// write of a crash: a torn tail, not a segment that does not verify.
func TestTornTailFailingLastRecordThenZeros(t *testing.T) {
	dir := t.TempDir()
	path := writeSegment(t, dir, five...)
	starts, _ := recordStarts(five...)
	b := readFile(t, path)
	b[starts[4]+recordHeaderSize] ^= 0xff
	writeFile(t, path, append(b, make([]byte, 100)...))

	s := open(t, dir, Options{})
	if rep := s.Recovery(); len(rep.TornTails) != 1 || len(rep.Quarantined) != 0 {
		t.Fatalf("Recovery = %+v", rep)
	}
	if got := fileSize(t, path); got != starts[4] {
		t.Fatalf("segment is %d bytes, want %d", got, starts[4])
	}
	wantRecords(t, s, five[:4]...)
}

func TestFlippedByteMidSegment(t *testing.T) {
	dir := t.TempDir()
	path := writeSegment(t, dir, five...)
	starts, _ := recordStarts(five...)
	b := readFile(t, path)
	b[starts[2]+recordHeaderSize+3] ^= 0x01 // one bit of record-2's data
	writeFile(t, path, b)

	log, logs := newLogger()
	s := open(t, dir, Options{Logger: log})
	rep := s.Recovery()
	if len(rep.Quarantined) != 1 || len(rep.TornTails) != 0 || rep.Records != 4 || rep.Segments != 1 {
		t.Fatalf("Recovery = %+v", rep)
	}
	q := rep.Quarantined[0]
	if filepath.Dir(q) != filepath.Join(dir, quarantineDir) || !strings.HasSuffix(q, segExt) {
		t.Fatalf("quarantined to %s", q)
	}
	if !bytes.Equal(readFile(t, q), b) {
		t.Fatal("the quarantined original is not byte for byte the damaged file")
	}
	if out := logs.String(); !strings.Contains(out, "[ERROR]") || !strings.Contains(out, q) {
		t.Errorf("quarantine not logged at error level with its path:\n%s", out)
	}
	// Records before and after the bad one are kept.
	wantRecords(t, s, "record-0", "record-1", "record-3", "record-4")
	mustClose(t, s)

	// The rescued segment verifies: a second Open finds nothing to do.
	s = open(t, dir, Options{})
	if rep := s.Recovery(); len(rep.Quarantined) != 0 || len(rep.TornTails) != 0 || rep.Records != 4 {
		t.Fatalf("second Recovery = %+v", rep)
	}
	wantRecords(t, s, "record-0", "record-1", "record-3", "record-4")
	if got := quarantined(t, dir, ""); len(got) != 1 {
		t.Fatalf("quarantine holds %v, want only the original", got)
	}
}

// A length field damaged beyond any record's size: the scan finds its
// footing on the next record that verifies, so only the damaged record is
// lost; the original is quarantined unchanged.
func TestImplausibleLengthResyncs(t *testing.T) {
	dir := t.TempDir()
	path := writeSegment(t, dir, five...)
	starts, _ := recordStarts(five...)
	b := readFile(t, path)
	binary.LittleEndian.PutUint32(b[starts[2]:], MaxRecordBytes+1)
	writeFile(t, path, b)

	s := open(t, dir, Options{})
	rep := s.Recovery()
	if len(rep.Quarantined) != 1 || !bytes.Equal(readFile(t, rep.Quarantined[0]), b) {
		t.Fatalf("Recovery = %+v, want the original quarantined unchanged", rep)
	}
	wantRecords(t, s, "record-0", "record-1", "record-3", "record-4")
}

// A length damaged to point past the end of the file (0xFFFFFF, say) is not
// a torn tail when records that verify follow: only the damaged record is
// lost, the original is quarantined and the loss logged at ERROR, not cut
// off as a crash's last write with a warning.
func TestLengthPastTheEndWithRecordsAfterIsDamage(t *testing.T) {
	dir := t.TempDir()
	records := names("record-", 300)
	path := writeSegment(t, dir, records...)
	starts, _ := recordStarts(records...)
	b := readFile(t, path)
	binary.LittleEndian.PutUint32(b[starts[150]:], 0xFFFFFF)
	writeFile(t, path, b)

	log, logs := newLogger()
	s := open(t, dir, Options{Logger: log})
	rep := s.Recovery()
	if len(rep.Quarantined) != 1 || len(rep.TornTails) != 0 || rep.Records != 299 {
		t.Fatalf("Recovery = %+v, want 299 records kept and the original quarantined", rep)
	}
	if out := logs.String(); !strings.Contains(out, "[ERROR]") || strings.Contains(out, "torn tail") {
		t.Fatalf("the damage is not logged as an error, or is taken for a torn tail:\n%s", out)
	}
	want := append(append([]string(nil), records[:150]...), records[151:]...)
	wantRecords(t, s, want...)
}

// A byte flipped in a record's length to a smaller length that still fits:
// the CRC fails, and the scan goes on at the next record that verifies
// rather than where the damaged length points.
func TestShortenedLengthResyncs(t *testing.T) {
	dir := t.TempDir()
	path := writeSegment(t, dir, five...)
	starts, _ := recordStarts(five...)
	b := readFile(t, path)
	binary.LittleEndian.PutUint32(b[starts[1]:], 3) // record-1 is 8 bytes
	writeFile(t, path, b)

	s := open(t, dir, Options{})
	if rep := s.Recovery(); len(rep.Quarantined) != 1 || rep.Records != 4 {
		t.Fatalf("Recovery = %+v", rep)
	}
	wantRecords(t, s, "record-0", "record-2", "record-3", "record-4")
}

func TestBadHeaderQuarantinesWholeFile(t *testing.T) {
	dir := t.TempDir()
	path := writeSegment(t, dir, five...)
	s := open(t, dir, Options{})
	seg := s.Sealed()[0]
	starts, _ := recordStarts(five...)
	if err := s.MarkReplayed(seg, starts[1]); err != nil {
		t.Fatal(err)
	}
	mustClose(t, s)
	b := readFile(t, path)
	b[0] = 'X'
	writeFile(t, path, b)

	log, logs := newLogger()
	s = open(t, dir, Options{Logger: log})
	rep := s.Recovery()
	if len(rep.Quarantined) != 1 || rep.Segments != 0 || rep.Records != 0 {
		t.Fatalf("Recovery = %+v", rep)
	}
	if !bytes.Equal(readFile(t, rep.Quarantined[0]), b) {
		t.Fatal("quarantined file differs from the original")
	}
	if !strings.Contains(logs.String(), "[ERROR]") {
		t.Errorf("not logged at error level:\n%s", logs)
	}
	if got := listDir(t, dir); strings.Join(got, ",") != "incoming,quarantine" {
		t.Fatalf("spool dir holds %v, want the segment and its progress file gone", got)
	}
	if st := s.Stats(); st.Segments != 0 || st.Bytes != 0 || st.Records != 0 {
		t.Fatalf("Stats = %+v", st)
	}
}

func TestProgressFileThatDoesNotVerifyReplaysAll(t *testing.T) {
	dir := t.TempDir()
	writeSegment(t, dir, five...)
	writeFile(t, filepath.Join(dir, progressName(1)), []byte("garbage"))
	log, logs := newLogger()
	s := open(t, dir, Options{Logger: log})
	if !strings.Contains(logs.String(), "progress file does not verify") {
		t.Errorf("not logged:\n%s", logs)
	}
	wantRecords(t, s, five...)
}

// Leftovers of steps that never complete a file hold no record of their
// own: recovery removes them and keeps everything else as it was.
func TestLeftoverTempFilesRemoved(t *testing.T) {
	dir := t.TempDir()
	path := writeSegment(t, dir, five...)
	s := open(t, dir, Options{})
	starts, _ := recordStarts(five...)
	if err := s.MarkReplayed(s.Sealed()[0], starts[2]); err != nil {
		t.Fatal(err)
	}
	mustClose(t, s)
	seg := readFile(t, path)

	writeFile(t, segPath(dir, 2)+tmpExt, encodeHeader(newClock().Now()))                       // a segment being created
	writeFile(t, filepath.Join(dir, progressName(1))+tmpExt, encodeProgress(starts[4]))        // a newer mark, not renamed
	writeFile(t, filepath.Join(dir, rescueName(1))+tmpExt, seg[:40])                           // a rescue being written
	writeFile(t, filepath.Join(dir, quarantineDir, "x-20260101T000000Z.seg"+tmpExt), seg[:30]) // a quarantine file being written
	writeFile(t, filepath.Join(dir, progressName(9)), encodeProgress(100))                     // progress of a retired segment
	writeFile(t, filepath.Join(dir, "notes.txt"), []byte("operator's"))                        // not the spool's

	s = open(t, dir, Options{})
	if got := strings.Join(listDir(t, dir), ","); got != "00000000000000000001.progress,00000000000000000001.seg,incoming,notes.txt,quarantine" {
		t.Fatalf("spool dir = %s", got)
	}
	if got := listDir(t, filepath.Join(dir, quarantineDir)); len(got) != 0 {
		t.Fatalf("quarantine = %v", got)
	}
	if !bytes.Equal(readFile(t, path), seg) {
		t.Fatal("segment changed")
	}
	wantRecords(t, s, five[2:]...) // resumes at the mark that was renamed
	mustAppend(t, s, "new")        // the sequence moved past the leftovers
	if fileSize(t, segPath(dir, 10)) == 0 {
		t.Fatal("new segment not after the highest sequence seen")
	}
}

// A segment with both a bad record and a torn tail is rescued: the torn
// tail stays in the quarantined original and is not listed on its own.
func TestBadRecordAndTornTail(t *testing.T) {
	dir := t.TempDir()
	path := writeSegment(t, dir, five...)
	starts, _ := recordStarts(five...)
	b := readFile(t, path)[:starts[4]+7]
	b[starts[1]+recordHeaderSize] ^= 0x04
	writeFile(t, path, b)

	s := open(t, dir, Options{})
	rep := s.Recovery()
	if len(rep.Quarantined) != 1 || len(rep.TornTails) != 0 || rep.Records != 3 {
		t.Fatalf("Recovery = %+v", rep)
	}
	if !bytes.Equal(readFile(t, rep.Quarantined[0]), b) {
		t.Fatal("quarantined original differs")
	}
	wantRecords(t, s, "record-0", "record-2", "record-3")
	if got, onDisk := s.Stats().Bytes, segmentBytesOnDisk(t, dir); got != onDisk {
		t.Fatalf("Stats.Bytes = %d, on disk %d", got, onDisk)
	}
}

// resync finds a record after damage of any length, its header and data
// on either side of a window's edge, and nothing in damage alone.
func TestResyncAcrossWindows(t *testing.T) {
	rec := appendRecord(nil, bytes.Repeat([]byte("r"), 100<<10), 42)
	for _, n := range []int{0, 1, 1000, resyncWindow - 100<<10, resyncWindow - recordHeaderSize - 1,
		resyncWindow - recordHeaderSize, resyncWindow - 5, resyncWindow, resyncWindow + 7, 2*resyncWindow + 3} {
		b := append(bytes.Repeat([]byte{0xff}, n), rec...)
		if got, err := resync(bytes.NewReader(b), 0, int64(len(b))); err != nil || got != int64(n) {
			t.Errorf("after %d bytes of damage: %d, %v", n, got, err)
		}
		if got, err := resync(bytes.NewReader(b[:len(b)-1]), 0, int64(len(b)-1)); err != nil || got != -1 {
			t.Errorf("after %d bytes of damage, the record cut short: %d, %v", n, got, err)
		}
	}
}
