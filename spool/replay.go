package spool

import (
	"bufio"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Sealed lists the sealed segments not yet retired, oldest (lowest
// sequence) first.
func (s *Spool) Sealed() []Segment {
	s.mu.Lock()
	segs := make([]Segment, 0, len(s.sealed))
	for _, st := range s.sealed {
		segs = append(segs, st.segment())
	}
	s.mu.Unlock()
	slices.SortFunc(segs, func(a, b Segment) int {
		switch {
		case a.Seq < b.Seq:
			return -1
		case a.Seq > b.Seq:
			return 1
		}
		return 0
	})
	return segs
}

// sealedState returns a copy of what the spool knows of a sealed segment.
func (s *Spool) sealedState(seq uint64) (segState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return segState{}, ErrClosed
	}
	st := s.sealed[seq]
	if st == nil {
		return segState{}, fmt.Errorf("%w: %s", ErrNoSegment, segName(seq))
	}
	return *st, nil
}

// Read calls fn with each record of a sealed segment after its replay
// progress, in order, and stops at fn's first error, which it returns.
// Every record is checked again as it is read: one that no longer
// verifies stops the read with ErrCorrupt.
func (s *Spool) Read(seg Segment, fn func(Record) error) error {
	st, err := s.sealedState(seg.Seq)
	if err != nil {
		return err
	}
	name := filepath.Base(st.path)
	f, err := s.fs.OpenFile(st.path, os.O_RDONLY, 0)
	if err != nil {
		return opErr("open", name, err)
	}
	defer f.Close()
	br := bufio.NewReaderSize(io.NewSectionReader(f, st.progress, st.end-st.progress), 1<<20)
	var hb [recordHeaderSize]byte
	for off := st.progress; off < st.end; {
		if _, err := io.ReadFull(br, hb[:]); err != nil {
			return opErr("read", name, err)
		}
		h := parseRecordHeader(hb[:])
		if !h.plausible() || off+h.size() > st.end {
			return fmt.Errorf("%w: %s at offset %d", ErrCorrupt, name, off)
		}
		data := make([]byte, h.length)
		if _, err := io.ReadFull(br, data); err != nil {
			return opErr("read", name, err)
		}
		if !h.verifies(data) {
			return fmt.Errorf("%w: %s at offset %d", ErrCorrupt, name, off)
		}
		off += h.size()
		if err := fn(Record{Data: data, At: time.Unix(0, h.at), End: off}); err != nil {
			return err
		}
	}
	return nil
}

// MarkReplayed records that every record of seg ending at or before end is
// in the database. end must be a Record.End of seg, at or after its
// current progress. The progress file is replaced atomically and the
// directory fsynced before it returns, so a crash then resumes after end.
func (s *Spool) MarkReplayed(seg Segment, end int64) error {
	s.adminMu.Lock()
	defer s.adminMu.Unlock()
	st, err := s.sealedState(seg.Seq)
	if err != nil {
		return err
	}
	name := filepath.Base(st.path)
	switch {
	case end == st.progress:
		return nil
	case end < st.progress:
		return fmt.Errorf("spool: mark %s at %d: before its progress %d", name, end, st.progress)
	case end > st.end:
		return fmt.Errorf("spool: mark %s at %d: past its last record at %d", name, end, st.end)
	}
	f, err := s.fs.OpenFile(st.path, os.O_RDONLY, 0)
	if err != nil {
		return opErr("open", name, err)
	}
	n, next, err := countRecords(f, name, st.progress, end, st.end)
	f.Close()
	if err != nil {
		return err
	}
	if err := writeAtomic(s.fs, filepath.Join(s.dir, progressName(st.seq)), encodeProgress(end)); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.sealed[st.seq] // still there: Retire also holds adminMu
	cur.progress = end
	cur.records -= n
	cur.oldest = next
	s.records -= int64(n)
	return nil
}

// Identity names seg wherever its file goes (adopted into another spool,
// say, under another sequence): a digest of its header, which holds its
// creation time, and of its first record's header, which holds that
// record's CRC. A rescue (recovery step 4.5) stamps a new header, so the
// identity of a segment whose offsets changed changes with them. The
// owner records replay progress under it where the spool's disk cannot
// fail it (queenside: in the database, with each replayed batch).
func (s *Spool) Identity(seg Segment) ([16]byte, error) {
	st, err := s.sealedState(seg.Seq)
	if err != nil {
		return [16]byte{}, err
	}
	name := filepath.Base(st.path)
	f, err := s.fs.OpenFile(st.path, os.O_RDONLY, 0)
	if err != nil {
		return [16]byte{}, opErr("open", name, err)
	}
	defer f.Close()
	b := make([]byte, headerSize+recordHeaderSize)
	if st.end == headerSize {
		b = b[:headerSize] // no record
	}
	if _, err := f.ReadAt(b, 0); err != nil {
		return [16]byte{}, opErr("read", name, err)
	}
	sum := sha256.Sum256(b)
	return [16]byte(sum[:16]), nil
}

// countRecords walks the record headers from from to to and returns how
// many records end there, and the append time of the record at to (zero
// when to is limit). to must fall on a record boundary.
func countRecords(f File, name string, from, to, limit int64) (int, time.Time, error) {
	br := bufio.NewReaderSize(io.NewSectionReader(f, from, to-from), 1<<20)
	var hb [recordHeaderSize]byte
	n := 0
	off := from
	for off < to {
		if _, err := io.ReadFull(br, hb[:]); err != nil {
			return 0, time.Time{}, opErr("read", name, err)
		}
		h := parseRecordHeader(hb[:])
		if !h.plausible() || off+h.size() > to {
			return 0, time.Time{}, fmt.Errorf("spool: mark %s at %d: not the end of a record", name, to)
		}
		if _, err := br.Discard(int(h.length)); err != nil {
			return 0, time.Time{}, opErr("read", name, err)
		}
		off += h.size()
		n++
	}
	if to == limit {
		return n, time.Time{}, nil
	}
	if _, err := f.ReadAt(hb[:], to); err != nil {
		return 0, time.Time{}, opErr("read", name, err)
	}
	return n, time.Unix(0, parseRecordHeader(hb[:]).at), nil
}

// Retire deletes a sealed segment, and then its progress file, once every
// record of it is in the database: marked replayed, or replayed up to
// replayedTo at its last record's end by the caller's word (the caller
// recorded that progress elsewhere, as when this disk had no room for the
// progress file). It returns ErrNotReplayed before that.
func (s *Spool) Retire(seg Segment, replayedTo int64) error {
	s.adminMu.Lock()
	defer s.adminMu.Unlock()
	st, err := s.sealedState(seg.Seq)
	if err != nil {
		return err
	}
	if st.records > 0 && replayedTo < st.end {
		return fmt.Errorf("%w: %s has %d records not marked replayed", ErrNotReplayed, filepath.Base(st.path), st.records)
	}
	// The segment goes first: a progress file left by a crash here is an
	// orphan the next Open removes, while the reverse order would replay
	// the whole segment again.
	if err := removeDurable(s.fs, st.path); err != nil {
		return err
	}
	s.mu.Lock()
	delete(s.sealed, st.seq)
	s.bytes -= st.size
	s.records -= int64(st.records)
	s.mu.Unlock()
	return removeDurable(s.fs, filepath.Join(s.dir, progressName(st.seq)))
}
