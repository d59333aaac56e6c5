package spool

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// errCrash is what every mutating operation returns once a faultFS has
// "crashed": the files stay exactly as they were at that step.
var errCrash = errors.New("simulated crash")

// faultFS wraps the real filesystem to count fsyncs and to fail, shorten
// or slow down chosen operations.
type faultFS struct {
	FS
	mu sync.Mutex
	// segSyncs counts File.Sync on segment files: the fsyncs of appends,
	// and of new segments' headers (an active segment is opened under its
	// ".seg.tmp" name).
	segSyncs int
	// syncDelay makes every File.Sync as slow as a disk's.
	syncDelay time.Duration
	// onWrite, when set, replaces File.Write; write is the real one.
	onWrite func(name string, p []byte, write func([]byte) (int, error)) (int, error)
	// onSync and onTruncate, when set, may fail File.Sync and File.Truncate.
	onSync     func(name string) error
	onTruncate func(name string) error
	// crashAt > 0 fails the crashAt-th mutating operation and every one
	// after it, as if the process had died just before it.
	crashAt   int
	mutations int
}

func newFaultFS() *faultFS { return &faultFS{FS: OSFS} }

func (f *faultFS) set(fn func(f *faultFS)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *faultFS) syncs() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.segSyncs
}

// mutate counts one mutating operation and says whether it may happen.
func (f *faultFS) mutate() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mutations++
	if f.crashAt > 0 && f.mutations >= f.crashAt {
		return errCrash
	}
	return nil
}

func (f *faultFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	if flag&os.O_CREATE != 0 {
		if err := f.mutate(); err != nil {
			return nil, err
		}
	}
	file, err := f.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &faultFile{File: file, fs: f, name: filepath.Base(name)}, nil
}

func (f *faultFS) Rename(oldpath, newpath string) error {
	if err := f.mutate(); err != nil {
		return err
	}
	return f.FS.Rename(oldpath, newpath)
}

func (f *faultFS) Remove(name string) error {
	if err := f.mutate(); err != nil {
		return err
	}
	return f.FS.Remove(name)
}

func (f *faultFS) MkdirAll(path string, perm os.FileMode) error {
	if err := f.mutate(); err != nil {
		return err
	}
	return f.FS.MkdirAll(path, perm)
}

func (f *faultFS) SyncDir(path string) error {
	if err := f.mutate(); err != nil {
		return err
	}
	return f.FS.SyncDir(path)
}

type faultFile struct {
	File
	fs   *faultFS
	name string
}

func (f *faultFile) Write(p []byte) (int, error) {
	if err := f.fs.mutate(); err != nil {
		return 0, err
	}
	f.fs.mu.Lock()
	hook := f.fs.onWrite
	f.fs.mu.Unlock()
	if hook != nil {
		return hook(f.name, p, f.File.Write)
	}
	return f.File.Write(p)
}

func (f *faultFile) Sync() error {
	if err := f.fs.mutate(); err != nil {
		return err
	}
	f.fs.mu.Lock()
	hook, delay := f.fs.onSync, f.fs.syncDelay
	if strings.Contains(f.name, segExt) {
		f.fs.segSyncs++
	}
	f.fs.mu.Unlock()
	time.Sleep(delay)
	if hook != nil {
		if err := hook(f.name); err != nil {
			return err
		}
	}
	return f.File.Sync()
}

func (f *faultFile) Truncate(size int64) error {
	if err := f.fs.mutate(); err != nil {
		return err
	}
	f.fs.mu.Lock()
	hook := f.fs.onTruncate
	f.fs.mu.Unlock()
	if hook != nil {
		if err := hook(f.name); err != nil {
			return err
		}
	}
	return f.File.Truncate(size)
}
