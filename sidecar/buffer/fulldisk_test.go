package buffer

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"

	"github.com/queenside/queenside/sidecar/store"
	"github.com/queenside/queenside/spool"
)

// fullDisk is the real filesystem, whose writes fail with ENOSPC while full.
type fullDisk struct {
	spool.FS
	full atomic.Bool
}

func (d *fullDisk) OpenFile(name string, flag int, perm os.FileMode) (spool.File, error) {
	f, err := d.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &fullDiskFile{File: f, disk: d}, nil
}

type fullDiskFile struct {
	spool.File
	disk *fullDisk
}

func (f *fullDiskFile) Write(p []byte) (int, error) {
	if f.disk.full.Load() {
		return 0, syscall.ENOSPC
	}
	return f.File.Write(p)
}

// storedOnce is a database that answers, keeps what is pushed in order,
// and deduplicates nothing, as a queue with dedupWindowSeconds 0. It keeps
// replay marks as the database does, in the push's transaction.
type storedOnce struct {
	mu     sync.Mutex
	stored []string // transaction ids, in the order of the pushes
	marks  map[uuid.UUID]int64
	// loseAnswer, when it reaches the push it counts down to, has that
	// push commit and its answer lost, as a connection that drops after
	// COMMIT went out.
	loseAnswer int
}

func (s *storedOnce) PushReplay(_ context.Context, msgs []store.Message, mark store.ReplayMark) ([]store.Outcome, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range msgs {
		s.stored = append(s.stored, m.TransactionID)
	}
	if s.marks == nil {
		s.marks = map[uuid.UUID]int64{}
	}
	s.marks[mark.Segment] = max(s.marks[mark.Segment], mark.End)
	if s.loseAnswer > 0 {
		if s.loseAnswer--; s.loseAnswer == 0 {
			return nil, fmt.Errorf("push: %w", io.ErrUnexpectedEOF)
		}
	}
	return make([]store.Outcome, len(msgs)), nil
}

func (s *storedOnce) ReplayedTo(_ context.Context, segment uuid.UUID) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.marks[segment], nil
}

func (s *storedOnce) ForgetReplayed(_ context.Context, segment uuid.UUID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.marks, segment)
	return nil
}

func (s *storedOnce) Ping(context.Context) (time.Duration, error) { return 0, nil }

func (s *storedOnce) DedupWindows(context.Context) (map[string]time.Duration, error) {
	return map[string]time.Duration{"q": 0}, nil
}

func (s *storedOnce) Bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithCancel(ctx)
}

func (s *storedOnce) ids() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.stored...)
}

// A replay on a full disk goes on: each batch records its progress in the
// database, in its own transaction, where the disk cannot refuse it. A
// batch whose answer is lost after it committed, and a crash that follows
// before the spool could note anything, store nothing twice: the sidecar
// started again skips what the database holds, and stores the rest once,
// in order, with the disk still full. Health says the disk is the cause.
func TestReplayOnAFullDiskStoresNothingTwice(t *testing.T) {
	dir := t.TempDir()
	disk := &fullDisk{FS: spool.OSFS}
	sp, err := spool.Open(dir, spool.Options{FS: disk})
	if err != nil {
		t.Fatal(err)
	}
	db := &storedOnce{}
	b, err := New(sp, db, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	const total = 3*replayBatch + 120
	var want []string
	for i := range total {
		id := fmt.Sprintf("t%d", i)
		want = append(want, id)
		if err := b.Add([]store.Message{{Queue: "q", Partition: "p", Payload: []byte{0x01}, TransactionID: id, MessageID: uuid.Must(uuid.NewV7())}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := sp.Seal(); err != nil { // sealed while the disk had room
		t.Fatal(err)
	}
	ctx := context.Background()
	disk.full.Store(true)
	if err := b.Add([]store.Message{{Queue: "q", Partition: "p", Payload: []byte{0x01}, TransactionID: "refused", MessageID: uuid.Must(uuid.NewV7())}}); err == nil {
		t.Fatal("a push spooled on a full disk")
	}
	db.loseAnswer = 2
	if err := b.pass(ctx); !store.IsUnavailable(err) {
		t.Fatalf("pass whose second batch lost its answer: %v", err)
	}
	if got := db.ids(); len(got) != 2*replayBatch {
		t.Fatalf("%d records stored before the answer was lost, want two batches of %d", len(got), replayBatch)
	}
	st := b.Stats()
	if st.Records != total || !st.DatabaseUp || !strings.Contains(strings.Join(st.Warnings, "; "), "the spool's disk refuses writes") ||
		!strings.Contains(strings.Join(st.Warnings, "; "), "PostgreSQL is not the cause") {
		t.Fatalf("%d records spooled, database up %v, warnings %q", st.Records, st.DatabaseUp, st.Warnings)
	}

	// The process dies; the disk is still full when it starts again.
	if err := sp.Close(); err != nil {
		t.Fatal(err)
	}
	sp, err = spool.Open(dir, spool.Options{FS: disk})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	b, err = New(sp, db, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	if err := b.pass(ctx); err != nil {
		t.Fatalf("pass after the restart, the disk full: %v", err)
	}
	if got := db.ids(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("stored %d records (%v...), want each of the %d once, in order", len(got), got[:min(len(got), 5)], total)
	}
	st = b.Stats()
	if st.Records != 0 || st.Skipped != 2*replayBatch || len(st.Warnings) != 0 {
		t.Fatalf("after the replay: %d records spooled, %d skipped, warnings %q", st.Records, st.Skipped, st.Warnings)
	}
	if len(db.marks) != 0 {
		t.Fatalf("marks of retired segments left in the database: %v", db.marks)
	}
}

// A record whose length was damaged on disk is lost to the replay, and
// said so: counted, warned of, and logged at ERROR with its queue,
// partition and transaction id, read from its data, which survived. The
// records after it are kept.
func TestDamagedRecordIsReportedByName(t *testing.T) {
	dir := t.TempDir()
	sp, err := spool.Open(dir, spool.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(sp, &storedOnce{}, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		m := store.Message{Queue: "orders", Partition: "p7", Payload: []byte{0x01}, TransactionID: fmt.Sprintf("t%d", i), MessageID: uuid.Must(uuid.NewV7())}
		if err := b.Add([]store.Message{m}); err != nil {
			t.Fatal(err)
		}
	}
	if err := sp.Seal(); err != nil {
		t.Fatal(err)
	}
	seg := sp.Sealed()[0]
	var ends []int64
	if err := sp.Read(seg, func(r spool.Record) error { ends = append(ends, r.End); return nil }); err != nil {
		t.Fatal(err)
	}
	if err := sp.Close(); err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile(seg.Path)
	if err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint32(file[ends[149]:], 0xFFFFFF) // record 150's length
	if err := os.WriteFile(seg.Path, file, 0o600); err != nil {
		t.Fatal(err)
	}

	var logs strings.Builder
	log := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})
	sp, err = spool.Open(dir, spool.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	b, err = New(sp, &storedOnce{}, log)
	if err != nil {
		t.Fatal(err)
	}
	st := b.Stats()
	if st.Damaged != 1 || st.Records != 299 || !strings.Contains(strings.Join(st.Warnings, "; "), "damaged on disk") {
		t.Fatalf("damaged %d, %d records kept, warnings %q", st.Damaged, st.Records, st.Warnings)
	}
	out := logs.String()
	if !strings.Contains(out, "[ERROR]") || !strings.Contains(out, "is lost to the replay") ||
		!strings.Contains(out, "queue=orders") || !strings.Contains(out, "partition=p7") || !strings.Contains(out, "transaction_id=t150") {
		t.Fatalf("the loss is not logged at ERROR by name:\n%s", out)
	}
}
