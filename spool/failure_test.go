package spool

import (
	"errors"
	"io"
	"strings"
	"syscall"
	"testing"
)

// Each fault hits the third Append of a spool, on segment 1. The Append
// must fail saying what failed, leave nothing of its records behind, and
// the next Append must succeed in a new segment.
func TestAppendFailures(t *testing.T) {
	halfThen := func(err error) func(string, []byte, func([]byte) (int, error)) (int, error) {
		return func(name string, p []byte, write func([]byte) (int, error)) (int, error) {
			n, _ := write(p[:len(p)/2])
			return n, err
		}
	}
	cases := []struct {
		name    string
		arm     func(f *faultFS)
		wantIs  error
		wantMsg string
	}{
		{
			name:    "ENOSPC on write",
			arm:     func(f *faultFS) { f.onWrite = halfThen(syscall.ENOSPC) },
			wantIs:  syscall.ENOSPC,
			wantMsg: "spool: write 00000000000000000001.seg: no space left on device",
		},
		{
			name:    "short write",
			arm:     func(f *faultFS) { f.onWrite = halfThen(nil) },
			wantIs:  io.ErrShortWrite,
			wantMsg: "spool: write 00000000000000000001.seg: short write",
		},
		{
			name: "fsync error",
			arm: func(f *faultFS) {
				failed := false
				f.onSync = func(string) error {
					if failed {
						return nil // the fsync after the truncate works
					}
					failed = true
					return syscall.EIO
				}
			},
			wantIs:  syscall.EIO,
			wantMsg: "spool: fsync 00000000000000000001.seg: input/output error",
		},
		{
			// The truncate works but its fsync fails too: sealed as it is,
			// which is already cut back.
			name: "fsync error, again after the truncate",
			arm: func(f *faultFS) {
				f.onSync = func(string) error { return syscall.EIO }
			},
			wantIs:  syscall.EIO,
			wantMsg: "spool: fsync 00000000000000000001.seg: input/output error",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			ffs := newFaultFS()
			log, logs := newLogger()
			s := open(t, dir, Options{FS: ffs, Logger: log})
			mustAppend(t, s, "a1", "a2")
			mustAppend(t, s, "b1")

			ffs.set(tc.arm)
			err := s.Append(bytesOf("c1", "c2"))
			ffs.set(func(f *faultFS) { f.onWrite, f.onSync = nil, nil })
			if !errors.Is(err, tc.wantIs) || err.Error() != tc.wantMsg {
				t.Fatalf("Append = %v, want %q", err, tc.wantMsg)
			}
			if !strings.Contains(logs.String(), "[ERROR]") {
				t.Errorf("failure not logged at error level:\n%s", logs)
			}
			// Cut back to what was fsynced, and sealed.
			_, end := recordStarts("a1", "a2", "b1")
			if got := fileSize(t, segPath(dir, 1)); got != end {
				t.Fatalf("segment 1 is %d bytes, want it cut back to %d", got, end)
			}

			mustAppend(t, s, "d1")
			if fileSize(t, segPath(dir, 2)) <= headerSize {
				t.Fatal("the Append after the failure did not go to a new segment")
			}
			if segs := s.Sealed(); len(segs) != 1 || segs[0].Seq != 1 {
				t.Fatalf("sealed = %+v, want the failed segment 1", segs)
			}
			if got, onDisk := s.Stats().Bytes, segmentBytesOnDisk(t, dir); got != onDisk {
				t.Errorf("Stats.Bytes = %d, on disk %d", got, onDisk)
			}
			mustClose(t, s)

			s = open(t, dir, Options{})
			if rep := s.Recovery(); len(rep.TornTails) != 0 || len(rep.Quarantined) != 0 {
				t.Fatalf("Recovery = %+v, want a clean spool", rep)
			}
			wantRecords(t, s, "a1", "a2", "b1", "d1")
		})
	}
}

// When even the truncate fails, the segment is sealed as it is: the
// replayer reads only what was fsynced, and the next Open cuts the torn
// tail. A record of the failed Append that reached the disk whole then
// verifies and comes back (README.md, Limits): at least once.
func TestAppendFailureWithFailedTruncate(t *testing.T) {
	dir := t.TempDir()
	ffs := newFaultFS()
	s := open(t, dir, Options{FS: ffs})
	mustAppend(t, s, "a1")
	ffs.set(func(f *faultFS) {
		f.onWrite = func(_ string, p []byte, write func([]byte) (int, error)) (int, error) {
			n, _ := write(p[:len(p)-3])
			return n, syscall.ENOSPC
		}
		f.onTruncate = func(string) error { return syscall.EIO }
	})
	if err := s.Append(bytesOf("b1", "b2")); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Append = %v, want ENOSPC", err)
	}
	ffs.set(func(f *faultFS) { f.onWrite, f.onTruncate = nil, nil })
	_, end := recordStarts("a1")
	if fileSize(t, segPath(dir, 1)) <= end {
		t.Fatal("test broken: the failed write left nothing to cut")
	}
	if got, onDisk := s.Stats().Bytes, segmentBytesOnDisk(t, dir); got != onDisk {
		t.Errorf("Stats.Bytes = %d, on disk %d", got, onDisk)
	}
	mustAppend(t, s, "c1")
	wantRecords(t, s, "a1", "c1") // segment 1 is read only up to a1
	mustClose(t, s)

	s = open(t, dir, Options{})
	if rep := s.Recovery(); len(rep.TornTails) != 1 || rep.TornTails[0] != segPath(dir, 1) {
		t.Fatalf("Recovery = %+v, want segment 1's torn tail", rep)
	}
	wantRecords(t, s, "a1", "b1", "c1")
}

func TestMaxBytes(t *testing.T) {
	dir := t.TempDir()
	const rec = recordHeaderSize + 8 // one 8-byte record on disk
	max := int64(headerSize + 3*rec)
	s := open(t, dir, Options{MaxBytes: max})
	mustAppend(t, s, "record-1")
	mustAppend(t, s, "record-2")
	before := s.Stats()
	// Two records would pass the bound, though one would fit: all or nothing.
	if err := s.Append(bytesOf("record-3", "record-4")); !errors.Is(err, ErrFull) {
		t.Fatalf("Append over the bound = %v, want ErrFull", err)
	}
	if after := s.Stats(); after != before || fileSize(t, segPath(dir, 1)) != before.Bytes {
		t.Fatalf("a refused Append wrote: before %+v, after %+v", before, after)
	}
	mustAppend(t, s, "record-3")
	if got := s.Stats().Bytes; got != max {
		t.Fatalf("Bytes = %d, want exactly the bound %d", got, max)
	}
	if err := s.Append(bytesOf("x")); !errors.Is(err, ErrFull) {
		t.Fatalf("Append when full = %v, want ErrFull", err)
	}
	mustClose(t, s)

	s = open(t, dir, Options{MaxBytes: max})
	wantRecords(t, s, "record-1", "record-2", "record-3")
	if err := s.Append(bytesOf("x")); !errors.Is(err, ErrFull) {
		t.Fatalf("Append after reopen = %v, want ErrFull: the bound counts sealed segments", err)
	}

	// Retiring what was replayed makes room again.
	seg := s.Sealed()[0]
	if err := s.MarkReplayed(seg, seg.Bytes); err != nil {
		t.Fatal(err)
	}
	if err := s.Retire(seg, seg.Bytes); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, s, "record-4")
	wantRecords(t, s, "record-4")
}
