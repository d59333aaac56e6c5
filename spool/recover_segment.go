package spool

import (
	"io"
	"os"
	"path/filepath"
	"time"
)

// recoverSegment is step 4 of the recovery for one segment file, at Open
// or on adoption. origin names it in quarantine/ and in the log. It returns
// nil for a segment moved whole to quarantine/.
func (s *Spool) recoverSegment(seq uint64, origin string) (*segState, Recovery, error) {
	var rep Recovery
	path := filepath.Join(s.dir, segName(seq))
	progPath := filepath.Join(s.dir, progressName(seq))

	progress, ok, err := readProgress(s.fs, progPath)
	if err != nil {
		return nil, rep, err
	}
	if !ok {
		s.log.Warn("progress file does not verify; the segment is replayed from its start", "path", progPath)
	}

	// Read-only: a segment that verifies is never written, so an operator's
	// read-only copy can be adopted. Only a torn tail needs a write handle.
	f, err := s.fs.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, rep, opErr("open", filepath.Base(path), err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, rep, opErr("stat", filepath.Base(path), err)
	}
	size := fi.Size()

	hdr := make([]byte, headerSize)
	if size < headerSize {
		hdr = nil
	} else if _, err := f.ReadAt(hdr, 0); err != nil {
		return nil, rep, opErr("read", filepath.Base(path), err)
	}
	if !headerVerifies(hdr) { // 4.1
		q, err := s.quarantineFile(path, origin)
		if err != nil {
			return nil, rep, err
		}
		s.log.Error("segment header does not verify; whole file moved to quarantine, no record kept",
			"path", path, "origin", origin, "quarantined", q)
		rep.Quarantined = append(rep.Quarantined, q)
		return nil, rep, removeDurable(s.fs, progPath)
	}

	// 4.2 and 4.6: records whose end is at or before the progress offset
	// are in the database; the first one after it is where reading resumes.
	st := &segState{seq: seq, path: path, end: headerSize, progress: headerSize}
	res, err := scanRecords(f, size, func(start int64, h recordHeader, _ []byte) error {
		end := start + h.size()
		st.end = end
		if end <= progress {
			st.progress = end
			return nil
		}
		st.records++
		if st.oldest.IsZero() {
			st.oldest = time.Unix(0, h.at)
		}
		return nil
	})
	if err != nil {
		return nil, rep, opErr("read", filepath.Base(path), err)
	}

	switch {
	case res.corrupt(): // 4.5
		q, kept, err := s.rescue(f, size, seq, progress, origin)
		if err != nil {
			return nil, rep, err
		}
		s.log.Error("segment does not verify; original moved to quarantine, every record that verifies kept",
			"path", path, "origin", origin, "quarantined", q, "damaged", len(res.bad),
			"records_kept", st.records)
		rep.Quarantined = append(rep.Quarantined, q)
		for _, b := range res.bad {
			d := Damage{Quarantined: q, Offset: b.from, Bytes: b.to - b.from}
			if n := min(b.to-b.from-recordHeaderSize, maxDamageData); n > 0 {
				d.Data = make([]byte, n)
				if _, err := f.ReadAt(d.Data, b.from+recordHeaderSize); err != nil {
					d.Data = nil // the damage is reported all the same
				}
			}
			rep.Damaged = append(rep.Damaged, d)
		}
		st.size, st.end, st.progress = headerSize+kept, headerSize+kept, headerSize
	case res.tornAt >= 0: // 4.4
		if err := s.cutTornTail(f, path, origin, res, size); err != nil {
			return nil, rep, err
		}
		rep.TornTails = append(rep.TornTails, path)
		st.size = res.tornAt
	default: // 4.3
		st.size = size
	}
	rep.Segments, rep.Records = 1, st.records
	return st, rep, nil
}

// cutTornTail is step 4.4: the bytes of a torn tail that are not all zero
// are copied to quarantine/ first, in case they were not a crash's last
// write but a record whose length field was damaged.
func (s *Spool) cutTornTail(f File, path, origin string, res scanResult, size int64) error {
	copyPath := ""
	if !res.tornZero {
		q, err := s.quarantinePath(origin, tornExt)
		if err != nil {
			return err
		}
		err = writeAtomicWith(s.fs, q, func(w io.Writer) error {
			_, err := io.Copy(w, io.NewSectionReader(f, res.tornAt, size-res.tornAt))
			return err
		})
		if err != nil {
			return err
		}
		copyPath = q
	}
	w, err := s.fs.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return opErr("open", filepath.Base(path), err)
	}
	defer w.Close()
	if err := w.Truncate(res.tornAt); err != nil {
		return opErr("truncate", filepath.Base(path), err)
	}
	if err := w.Sync(); err != nil {
		return opErr("fsync", filepath.Base(path), err)
	}
	s.log.Warn("torn tail cut off segment", "path", path, "origin", origin,
		"offset", res.tornAt, "bytes", size-res.tornAt, "zero", res.tornZero, "copy", copyPath)
	return nil
}

// rescue is step 4.5: the verified records not yet replayed go into a new
// file that takes the segment's place, and the original goes, unchanged,
// to quarantine/. It returns where the original is and the bytes of
// records kept. The order of the steps is what step 3 relies on.
func (s *Spool) rescue(f File, size int64, seq uint64, progress int64, origin string) (string, int64, error) {
	segPath := filepath.Join(s.dir, segName(seq))
	rescuePath := filepath.Join(s.dir, rescueName(seq))
	var kept int64
	var rec []byte
	// 4.5.1 and 4.5.2: <seq>.rescue.tmp, fsynced, renamed to <seq>.rescue.
	err := writeAtomicWith(s.fs, rescuePath, func(w io.Writer) error {
		// A new header: the rescue's offsets are not the original's, so
		// it must not share its identity (Identity).
		if _, err := w.Write(encodeHeader(s.now())); err != nil {
			return err
		}
		_, err := scanRecords(f, size, func(start int64, h recordHeader, data []byte) error {
			if start+h.size() <= progress {
				return nil
			}
			rec = appendRecord(rec[:0], data, h.at)
			kept += int64(len(rec))
			_, err := w.Write(rec)
			return err
		})
		return err
	})
	if err != nil {
		return "", 0, err
	}
	q, err := s.quarantineFile(segPath, origin) // 4.5.3
	if err != nil {
		return "", 0, err
	}
	// 4.5.4: the rescue holds only records not yet replayed.
	if err := removeDurable(s.fs, filepath.Join(s.dir, progressName(seq))); err != nil {
		return "", 0, err
	}
	if err := renameDurable(s.fs, rescuePath, segPath); err != nil { // 4.5.5
		return "", 0, err
	}
	return q, kept, nil
}
