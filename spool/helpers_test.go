package spool

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// open opens a spool that the test closes at its end if it is still open.
func open(t *testing.T, dir string, opts Options) *Spool {
	t.Helper()
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func mustClose(t *testing.T, s *Spool) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func mustAppend(t *testing.T, s *Spool, records ...string) {
	t.Helper()
	if err := s.Append(bytesOf(records...)); err != nil {
		t.Fatalf("Append(%q): %v", records, err)
	}
}

func bytesOf(records ...string) [][]byte {
	out := make([][]byte, len(records))
	for i, r := range records {
		out[i] = []byte(r)
	}
	return out
}

// names returns prefix-0 .. prefix-(n-1).
func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// readAll seals the active segment and returns every record not yet
// replayed, oldest segment first.
func readAll(t *testing.T, s *Spool) []Record {
	t.Helper()
	if err := s.Seal(); err != nil {
		t.Fatalf("Seal: %v", err)
	}
	var out []Record
	for _, seg := range s.Sealed() {
		err := s.Read(seg, func(r Record) error {
			out = append(out, r)
			return nil
		})
		if err != nil {
			t.Fatalf("Read %s: %v", seg.Path, err)
		}
	}
	return out
}

func dataOf(recs []Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = string(r.Data)
	}
	return out
}

func wantRecords(t *testing.T, s *Spool, want ...string) {
	t.Helper()
	got := dataOf(readAll(t, s))
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("records:\n got %q\nwant %q", got, want)
	}
}

// clock is a fake Options.Now that moves one second per call.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Second)
	return c.t
}

// logBuffer collects a logger's output for assertions.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func newLogger() (hclog.Logger, *logBuffer) {
	b := &logBuffer{}
	return hclog.New(&hclog.LoggerOptions{Output: b, Level: hclog.Debug}), b
}

// segPath is the path of segment seq in dir.
func segPath(dir string, seq uint64) string { return filepath.Join(dir, segName(seq)) }

// recordStarts returns where each record of a segment written by one
// Append per record starts, and the offset past the last one.
func recordStarts(records ...string) ([]int64, int64) {
	off := int64(headerSize)
	starts := make([]int64, len(records))
	for i, r := range records {
		starts[i] = off
		off += recordHeaderSize + int64(len(r))
	}
	return starts, off
}

// writeSegment makes dir/00000000000000000001.seg holding records, one
// Append each, and returns its path.
func writeSegment(t *testing.T, dir string, records ...string) string {
	t.Helper()
	s := open(t, dir, Options{})
	for _, r := range records {
		mustAppend(t, s, r)
	}
	mustClose(t, s)
	return segPath(dir, 1)
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o640); err != nil {
		t.Fatal(err)
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// listDir returns the names in dir, sorted.
func listDir(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// segmentBytesOnDisk adds up the sizes of the segment files in dir, which
// Stats.Bytes must equal.
func segmentBytesOnDisk(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	for _, name := range listDir(t, dir) {
		if _, kind := parseName(name); kind == kindSegment {
			n += fileSize(t, filepath.Join(dir, name))
		}
	}
	return n
}
