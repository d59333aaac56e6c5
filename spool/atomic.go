package spool

import (
	"bufio"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

const (
	filePerm os.FileMode = 0o640
	dirPerm  os.FileMode = 0o750
)

// writeAtomic makes path hold exactly data, or leaves it as it was: see
// writeAtomicWith.
func writeAtomic(fsys FS, path string, data []byte) error {
	return writeAtomicWith(fsys, path, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// writeAtomicWith writes a file by way of path+".tmp": fill writes it, it is
// fsynced and closed, renamed over path, and the directory is fsynced. A
// crash at any point leaves either the old path or the new one, and at
// worst a ".tmp" that recovery knows to be incomplete.
func writeAtomicWith(fsys FS, path string, fill func(w io.Writer) error) error {
	tmp := path + tmpExt
	name := filepath.Base(tmp)
	f, err := fsys.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, filePerm)
	if err != nil {
		return opErr("create", name, err)
	}
	bw := bufio.NewWriterSize(f, 256<<10)
	err = fill(bw)
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		err = opErr("write", name, err)
	} else if serr := f.Sync(); serr != nil {
		err = opErr("fsync", name, serr)
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err = opErr("close", name, cerr)
	}
	if err != nil {
		// Best effort: recovery removes it anyway if this fails too.
		_ = fsys.Remove(tmp)
		return err
	}
	if err := fsys.Rename(tmp, path); err != nil {
		return opErr("rename", name, err)
	}
	return syncDir(fsys, filepath.Dir(path))
}

// syncDir fsyncs a directory, with an error in the spool's words.
func syncDir(fsys FS, dir string) error {
	if err := fsys.SyncDir(dir); err != nil {
		return opErr("fsync directory", dir, err)
	}
	return nil
}

// renameDurable renames and fsyncs the directories of both names, so the
// rename survives a crash once it returns.
func renameDurable(fsys FS, from, to string) error {
	if err := fsys.Rename(from, to); err != nil {
		return opErr("rename", filepath.Base(from), err)
	}
	if err := syncDir(fsys, filepath.Dir(to)); err != nil {
		return err
	}
	if filepath.Dir(from) != filepath.Dir(to) {
		return syncDir(fsys, filepath.Dir(from))
	}
	return nil
}

// removeDurable removes name and fsyncs its directory. A name already gone
// is no error: every caller only wants it gone.
func removeDurable(fsys FS, name string) error {
	if err := fsys.Remove(name); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return opErr("remove", filepath.Base(name), err)
	}
	return syncDir(fsys, filepath.Dir(name))
}
