package spool

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// copyDir copies a spool directory tree, so each crash starts from the
// same files.
func copyDir(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o750)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), b, 0o640)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// crashEveryStep opens a copy of template with a filesystem that dies at
// the k-th mutating operation, for every k until an Open completes, then
// opens the files the crash left with the real filesystem and calls check.
// It returns the listings of the spool directory each crash left.
func crashEveryStep(t *testing.T, template string, check func(t *testing.T, dir string, s *Spool)) [][]string {
	t.Helper()
	var states [][]string
	for k := 1; ; k++ {
		dir := filepath.Join(t.TempDir(), "spool")
		copyDir(t, template, dir)
		ffs := newFaultFS()
		ffs.crashAt = k
		crashed, err := Open(dir, Options{FS: ffs})
		if err == nil {
			// No crash: every step of this Open ran.
			mustClose(t, crashed)
			if k < 5 {
				t.Fatalf("the Open made only %d changes: nothing was tested", k-1)
			}
			return states
		}
		if !errors.Is(err, errCrash) {
			t.Fatalf("crash at step %d: Open = %v", k, err)
		}
		states = append(states, listDir(t, dir))
		s := open(t, dir, Options{})
		check(t, dir, s)
		mustClose(t, s)
	}
}

// A crash at any step of a rescue loses no record and duplicates none, and
// the damaged original ends in quarantine/ exactly once, unchanged.
func TestCrashDuringRescue(t *testing.T) {
	template := filepath.Join(t.TempDir(), "spool")
	path := writeSegment(t, template, five...)
	starts, _ := recordStarts(five...)
	s := open(t, template, Options{})
	if err := s.MarkReplayed(s.Sealed()[0], starts[1]); err != nil {
		t.Fatal(err)
	}
	mustClose(t, s)
	damaged := readFile(t, path)
	damaged[starts[2]+recordHeaderSize] ^= 0x80
	writeFile(t, path, damaged)

	states := crashEveryStep(t, template, func(t *testing.T, dir string, s *Spool) {
		// record-0 was replayed, record-2 is damaged.
		wantRecords(t, s, "record-1", "record-3", "record-4")
		qs := quarantined(t, dir, "")
		if len(qs) != 1 || !bytes.Equal(readFile(t, qs[0]), damaged) {
			t.Fatalf("quarantine = %v, want the damaged original once", qs)
		}
	})

	// The crashes covered the states recovery step 3 resolves.
	seen := map[string]bool{}
	for _, st := range states {
		has := func(name string) bool { return slices.Contains(st, name) }
		switch {
		case has(rescueName(1) + tmpExt):
			seen["rescue.tmp"] = true
		case has(rescueName(1)) && has(segName(1)):
			seen["rescue beside the original"] = true
		case has(rescueName(1)) && has(progressName(1)):
			seen["rescue, original quarantined, progress left"] = true
		case has(rescueName(1)):
			seen["rescue, original quarantined, progress removed"] = true
		}
	}
	if len(seen) != 4 {
		t.Fatalf("crash states covered: %v", seen)
	}
}

// A crash while a torn tail is cut keeps every record before it; at worst
// the cut bytes are copied to quarantine/ twice.
func TestCrashDuringTornTailCut(t *testing.T) {
	template := filepath.Join(t.TempDir(), "spool")
	path := writeSegment(t, template, five...)
	starts, _ := recordStarts(five...)
	if err := os.Truncate(path, starts[4]+5); err != nil {
		t.Fatal(err)
	}
	crashEveryStep(t, template, func(t *testing.T, dir string, s *Spool) {
		wantRecords(t, s, five[:4]...)
		if got := fileSize(t, segPath(dir, 1)); got != starts[4] {
			t.Fatalf("segment is %d bytes, want %d", got, starts[4])
		}
		for _, q := range quarantined(t, dir, "") {
			if !strings.HasSuffix(q, tornExt) || len(readFile(t, q)) != 5 {
				t.Fatalf("unexpected quarantine file %s", q)
			}
		}
	})
}

// A crash while a segment is adopted leaves the file either still in
// incoming/ or in the spool, where the next Open recovers it.
func TestCrashDuringAdopt(t *testing.T) {
	src := filepath.Join(t.TempDir(), "other")
	donor := writeSegment(t, src, five...)
	starts, _ := recordStarts(five...)
	b := readFile(t, donor)
	b[starts[3]+recordHeaderSize] ^= 1 // adoption must rescue it

	for k := 1; ; k++ {
		dir := filepath.Join(t.TempDir(), "spool")
		s := open(t, dir, Options{})
		mustClose(t, s)
		in := filepath.Join(dir, incomingDir, "podA.seg")
		writeFile(t, in, b)

		ffs := newFaultFS()
		s = open(t, dir, Options{FS: ffs})
		ffs.set(func(f *faultFS) { f.crashAt = f.mutations + k })
		_, _, err := s.Adopt(in)
		mustClose(t, s)
		if err == nil {
			if k < 4 {
				t.Fatalf("Adopt made only %d changes", k-1)
			}
			return
		}
		if !errors.Is(err, errCrash) {
			t.Fatalf("crash at step %d: Adopt = %v", k, err)
		}
		s = open(t, dir, Options{})
		_, stillIncoming := os.Stat(in)
		if stillIncoming == nil {
			// Not taken yet: adopting it now must work.
			if _, _, err := s.Adopt(in); err != nil {
				t.Fatalf("after crash at step %d: Adopt = %v", k, err)
			}
		}
		wantRecords(t, s, "record-0", "record-1", "record-2", "record-4")
		if qs := quarantined(t, dir, segExt); len(qs) != 1 || !bytes.Equal(readFile(t, qs[0]), b) {
			t.Fatalf("after crash at step %d: quarantine = %v", k, qs)
		}
		mustClose(t, s)
	}
}
