package spool

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// quarantinePath returns a name in quarantine/ that is not taken:
// <origin>-<UTC time><ext>, with a counter added if needed. quarantine/ is
// never cleaned by queenside, so a name must never be reused.
func (s *Spool) quarantinePath(origin, ext string) (string, error) {
	stem := label(origin) + "-" + s.now().UTC().Format(quarantineTime)
	for i := 1; ; i++ {
		name := stem
		if i > 1 {
			name = fmt.Sprintf("%s-%d", stem, i)
		}
		p := filepath.Join(s.quarantineDir(), name+ext)
		f, err := s.fs.OpenFile(p, os.O_RDONLY, 0)
		if errors.Is(err, fs.ErrNotExist) {
			return p, nil
		}
		if err != nil {
			return "", opErr("open", p, err)
		}
		f.Close()
	}
}

// quarantineFile moves a file, unchanged, into quarantine/ and returns
// where it now is.
func (s *Spool) quarantineFile(path, origin string) (string, error) {
	q, err := s.quarantinePath(origin, segExt)
	if err != nil {
		return "", err
	}
	if err := renameDurable(s.fs, path, q); err != nil {
		return "", err
	}
	return q, nil
}

// Quarantine writes records as a valid segment file into quarantine/, for
// records the owner will not replay (for instance ones the database
// rejected), and returns its path. The file is complete and fsynced when it
// returns; the caller may then mark the records replayed. name says where
// they came from; the path adds a time and, if needed, a counter. The
// records are stamped with the current time.
func (s *Spool) Quarantine(name string, records [][]byte) (string, error) {
	if err := checkRecordSizes(records); err != nil {
		return "", err
	}
	s.adminMu.Lock()
	defer s.adminMu.Unlock()
	if s.isClosed() {
		return "", ErrClosed
	}
	q, err := s.quarantinePath(name, segExt)
	if err != nil {
		return "", err
	}
	now := s.now()
	err = writeAtomicWith(s.fs, q, func(w io.Writer) error {
		if _, err := w.Write(encodeHeader(now)); err != nil {
			return err
		}
		var rec []byte
		for _, r := range records {
			rec = appendRecord(rec[:0], r, now.UnixNano())
			if _, err := w.Write(rec); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	s.log.Warn("records quarantined", "path", q, "records", len(records))
	return q, nil
}
