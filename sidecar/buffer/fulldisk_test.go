package buffer

import (
	"context"
	"encoding/binary"
	"fmt"
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
// and deduplicates nothing, as a queue with dedupWindowSeconds 0.
type storedOnce struct {
	mu     sync.Mutex
	stored []string // transaction ids, in the order of the pushes
}

func (s *storedOnce) PushApart(_ context.Context, msgs []store.Message) ([]store.Outcome, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range msgs {
		s.stored = append(s.stored, m.TransactionID)
	}
	return make([]store.Outcome, len(msgs)), nil
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

// A replay whose progress the spool's disk refuses stops after the batch
// it committed, stores nothing twice however often it is tried while the
// disk stays full, says why without taking the database for down, and goes
// on from that batch once the disk has room: every record stored once, in
// order.
func TestReplayOnAFullDiskStoresNothingTwice(t *testing.T) {
	disk := &fullDisk{FS: spool.OSFS}
	sp, err := spool.Open(t.TempDir(), spool.Options{FS: disk})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
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
	for try := range 5 {
		if err := b.pass(ctx); err == nil || !strings.Contains(err.Error(), "no space left on device") {
			t.Fatalf("pass %d on a full disk: %v", try, err)
		}
	}
	if got := db.ids(); len(got) != replayBatch {
		t.Fatalf("%d records stored while the disk was full, want the one batch of %d before it stopped", len(got), replayBatch)
	}
	st := b.Stats()
	if !st.DatabaseUp || !strings.Contains(strings.Join(st.Warnings, "; "), "the spool's disk refuses its replay progress") {
		t.Fatalf("database up %v, warnings %q", st.DatabaseUp, st.Warnings)
	}
	disk.full.Store(false)
	if err := b.pass(ctx); err != nil {
		t.Fatalf("pass once the disk has room: %v", err)
	}
	if got := db.ids(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("stored %d records (%v...), want each of the %d once, in order", len(got), got[:min(len(got), 5)], total)
	}
	if st := b.Stats(); st.Records != 0 || len(st.Warnings) != 0 {
		t.Fatalf("after the replay: %d records spooled, warnings %q", st.Records, st.Warnings)
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
