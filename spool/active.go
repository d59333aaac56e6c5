package spool

import (
	"io"
	"os"
	"path/filepath"
	"time"
)

// activeSegment is the one segment being appended to. Only the holder of
// Spool.writeMu touches it.
type activeSegment struct {
	f       File
	seq     uint64
	path    string
	size    int64 // bytes written and fsynced: where a failed write is cut back to
	records int
	oldest  time.Time
}

// openActive creates a new segment by way of a ".seg.tmp" holding only the
// header, so that a crash never leaves a ".seg" without a whole header.
func (s *Spool) openActive() error {
	s.mu.Lock()
	seq := s.nextSeq
	s.nextSeq++
	s.mu.Unlock()

	path := filepath.Join(s.dir, segName(seq))
	tmp := path + tmpExt
	f, err := s.fs.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, filePerm)
	if err != nil {
		return opErr("create", filepath.Base(tmp), err)
	}
	if _, werr := writeFull(f, encodeHeader(s.now())); werr != nil {
		err = opErr("write", filepath.Base(tmp), werr)
	} else if serr := f.Sync(); serr != nil {
		err = opErr("fsync", filepath.Base(tmp), serr)
	} else if rerr := s.fs.Rename(tmp, path); rerr != nil {
		err = opErr("rename", filepath.Base(tmp), rerr)
	}
	if err != nil {
		f.Close()
		_ = s.fs.Remove(tmp) // recovery removes it anyway
		return err
	}

	s.active = &activeSegment{f: f, seq: seq, path: path, size: headerSize}
	s.mu.Lock()
	s.hasActive = true
	s.bytes += headerSize
	s.mu.Unlock()
	if err := syncDir(s.fs, s.dir); err != nil {
		// Its name may not survive a crash: give it no record.
		s.sealActive()
		return err
	}
	return nil
}

// writeFull writes b and calls a short write an error.
func writeFull(f File, b []byte) (int, error) {
	n, err := f.Write(b)
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	return n, err
}

// writeActive appends buf to the active segment and fsyncs it. On failure
// the segment is cut back and sealed; the error says what failed.
func (s *Spool) writeActive(buf []byte) error {
	a := s.active
	name := segName(a.seq)
	n, err := writeFull(a.f, buf)
	if err != nil {
		err = opErr("write", name, err)
	} else if serr := a.f.Sync(); serr != nil {
		err = opErr("fsync", name, serr)
	}
	if err != nil {
		s.abandonActive(int64(n), err)
		return err
	}
	a.size += int64(len(buf))
	return nil
}

// activeWritten counts a group that is now durable in the active segment,
// and seals the segment once it is full so the replayer can have it.
func (s *Spool) activeWritten(n int64, records int, at time.Time) {
	a := s.active
	a.records += records
	if a.oldest.IsZero() {
		a.oldest = at
	}
	s.mu.Lock()
	s.bytes += n
	s.records += int64(records)
	s.activeOldest = a.oldest
	s.mu.Unlock()
	if a.size >= s.opts.SegmentBytes {
		s.sealActive()
	}
}

// abandonActive handles a failed write or fsync. After a failed fsync the
// kernel may have dropped the dirty pages and forgotten the error, so the
// file cannot be trusted with more records: it is cut back to its last
// fsynced size and sealed. If even that fails, it is sealed as it is; its
// end stays at the last fsynced record, so nothing past it is read, and
// the next Open cuts the rest off as a torn tail.
func (s *Spool) abandonActive(written int64, cause error) {
	a := s.active
	diskSize := a.size
	err := a.f.Truncate(a.size)
	if err != nil {
		diskSize = a.size + written
	} else {
		err = a.f.Sync()
	}
	if err != nil {
		s.log.Error("append failed and the segment could not be cut back; sealed as it is, the next open recovers it",
			"path", a.path, "error", cause, "truncate_error", err)
	} else {
		s.log.Error("append failed; segment cut back to its last fsynced record and sealed",
			"path", a.path, "error", cause)
	}
	s.sealActiveAs(diskSize)
}

// sealActive makes the active segment sealed; the next Append starts a
// new one.
func (s *Spool) sealActive() { s.sealActiveAs(s.active.size) }

func (s *Spool) sealActiveAs(diskSize int64) {
	a := s.active
	s.active = nil
	if err := a.f.Close(); err != nil {
		// Every record in it was fsynced; the close only releases it.
		s.log.Warn("close sealed segment", "path", a.path, "error", err)
	}
	st := &segState{
		seq: a.seq, path: a.path, end: a.size, size: diskSize,
		progress: headerSize, records: a.records, oldest: a.oldest,
	}
	s.mu.Lock()
	s.sealed[a.seq] = st
	s.hasActive = false
	s.activeOldest = time.Time{}
	s.bytes += diskSize - a.size
	s.mu.Unlock()
}

// Seal makes the active segment sealed if it holds records, so that the
// replayer can read them. The next Append starts a new segment.
func (s *Spool) Seal() error {
	if s.isClosed() {
		return ErrClosed
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	if s.active != nil && s.active.records > 0 {
		s.sealActive()
	}
	return nil
}
