package sidecar

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/buffer"
	"github.com/queenside/queenside/sidecar/store"
	"github.com/queenside/queenside/spool"
)

// faultyFS is the real filesystem with failures switched on at will.
type faultyFS struct {
	spool.FS
	mu       sync.Mutex
	writeErr error // returned by writes; with short, after writing half
	short    bool
	syncErr  error // returned by file fsyncs
	failures int
}

func (f *faultyFS) set(writeErr error, short bool, syncErr error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.writeErr, f.short, f.syncErr = writeErr, short, syncErr
}

func (f *faultyFS) OpenFile(name string, flag int, perm os.FileMode) (spool.File, error) {
	file, err := f.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &faultyFile{File: file, fs: f}, nil
}

type faultyFile struct {
	spool.File
	fs *faultyFS
}

func (f *faultyFile) Write(p []byte) (int, error) {
	f.fs.mu.Lock()
	werr, short := f.fs.writeErr, f.fs.short
	if werr != nil {
		f.fs.failures++
	}
	f.fs.mu.Unlock()
	if werr == nil {
		return f.File.Write(p)
	}
	if short {
		n, _ := f.File.Write(p[:len(p)/2])
		return n, werr
	}
	return 0, werr
}

func (f *faultyFile) Sync() error {
	f.fs.mu.Lock()
	serr := f.fs.syncErr
	if serr != nil {
		f.fs.failures++
	}
	f.fs.mu.Unlock()
	if serr != nil {
		return serr
	}
	return f.File.Sync()
}

// TestSpoolWriteFailuresFailThePush injects ENOSPC, a short write and an
// fsync error under the spool of a sidecar whose database is unreachable:
// each push is answered failed with the cause, never buffered, and only the
// pushes answered buffered are in the spool afterwards.
func TestSpoolWriteFailuresFailThePush(t *testing.T) {
	spoolDir := filepath.Join(shortTempDir(t), "spool")
	ffs := &faultyFS{FS: spool.OSFS}
	sp, err := spool.Open(spoolDir, spool.Options{FS: ffs, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	srv, socket := serveWithoutDatabase(t, func(st *store.Store) *buffer.Buffer {
		buf, err := buffer.New(sp, st, testLogger())
		if err != nil {
			t.Fatal(err)
		}
		return buf
	})
	c := dialClient(t, socket)

	push := func(txid string) protocol.PushResult {
		t.Helper()
		res, err := c.Push(testContext(t), item(t, "q", "p", txid, txid))
		if err != nil {
			t.Fatal(err)
		}
		return res[0]
	}
	if r := push("before"); r.Status != protocol.StatusBuffered {
		t.Fatalf("healthy spool: %+v", r)
	}
	cases := []struct {
		name, txid, want string
		writeErr         error
		short            bool
		syncErr          error
	}{
		{"ENOSPC", "enospc", "no space left on device", syscall.ENOSPC, false, nil},
		{"short write", "short", "no space left on device", syscall.ENOSPC, true, nil},
		{"fsync error", "fsync", "input/output error", nil, false, syscall.EIO},
	}
	for _, tc := range cases {
		// A good push first, so the fault hits a record written into an
		// open segment rather than the creation of a new one.
		if r := push("ok-" + tc.txid); r.Status != protocol.StatusBuffered {
			t.Fatalf("before %s: %+v", tc.name, r)
		}
		ffs.set(tc.writeErr, tc.short, tc.syncErr)
		r := push(tc.txid)
		ffs.set(nil, false, nil)
		if r.Status != protocol.StatusFailed || r.Error == nil || !r.Error.Retryable ||
			!strings.Contains(r.Error.Message, tc.want) || !strings.Contains(r.Error.Message, "spool") {
			t.Fatalf("%s: %+v %+v, want failed with a retryable error naming the spool and %q", tc.name, r, r.Error, tc.want)
		}
		t.Logf("%s: %s: %s", tc.name, r.Error.Code, r.Error.Message)
	}
	if r := push("after"); r.Status != protocol.StatusBuffered {
		t.Fatalf("after the faults: %+v", r)
	}
	if h := srv.Health(context.Background()); h.Spool.Records != 5 {
		t.Fatalf("health counts %d spooled records, want 5", h.Spool.Records)
	}
	srv.Close()
	if err := sp.Close(); err != nil {
		t.Fatal(err)
	}

	// What is on disk: exactly the two pushes answered buffered.
	sp2, err := spool.Open(spoolDir, spool.Options{Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer sp2.Close()
	var found []string
	for _, seg := range sp2.Sealed() {
		err := sp2.Read(seg, func(r spool.Record) error {
			for _, tx := range []string{"before", "ok-enospc", "enospc", "ok-short", "short", "ok-fsync", "fsync", "after"} {
				if bytes.Contains(r.Data, []byte{0xa0 | byte(len(tx))}) && bytes.Contains(r.Data, append([]byte{0xa0 | byte(len(tx))}, tx...)) {
					found = append(found, tx)
					break
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := strings.Join(found, ","); got != "before,ok-enospc,ok-short,ok-fsync,after" {
		t.Fatalf("the spool holds %v, want exactly the five pushes answered buffered", got)
	}
}
