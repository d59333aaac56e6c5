package spool

import (
	"bufio"
	"io"
)

// scanResult is what a scan of a segment's records found. README.md,
// "Recovery on Open" step 4.2, gives the rules.
type scanResult struct {
	verified int    // records whose CRC holds
	bad      []span // the bytes of records that are bad; the segment does not verify
	tornAt   int64  // where a torn tail starts, or -1 when there is none
	tornZero bool   // every byte of the torn tail is zero
}

// span is a range of a segment's bytes, from included, to excluded.
type span struct{ from, to int64 }

// damaged records bad bytes from off to the next record that verifies
// (next), or to the end of the file (next < 0).
func (r *scanResult) damaged(off, next, size int64) {
	if next < 0 {
		next = size
	}
	r.bad = append(r.bad, span{off, next})
}

// corrupt reports whether the segment does not verify and must be rescued.
func (r scanResult) corrupt() bool { return len(r.bad) > 0 }

// scanRecords checks every record of a segment of the given size, after its
// header, and calls fn with each one that verifies, in order. data is valid
// only during the call. An error is an I/O error or fn's; a damaged segment
// is not an error but a result.
func scanRecords(f io.ReaderAt, size int64, fn func(start int64, h recordHeader, data []byte) error) (scanResult, error) {
	res := scanResult{tornAt: -1}
	br := bufio.NewReaderSize(io.NewSectionReader(f, headerSize, size-headerSize), 1<<20)
	// resume handles damage at off: the bytes up to the next record that
	// verifies are bad, and the scan goes on there (ok). When no record
	// verifies after it, the damage runs to the end of the file, or, with
	// tornIfNone, is the torn tail of a crash's last write.
	resume := func(off int64, tornIfNone bool) (next int64, ok bool, err error) {
		if next, err = resync(f, off+1, size); err != nil {
			return 0, false, err
		}
		if next < 0 && tornIfNone {
			return 0, false, res.tear(f, off, size)
		}
		res.damaged(off, next, size)
		if next < 0 {
			return 0, false, nil
		}
		br.Reset(io.NewSectionReader(f, next, size-next))
		return next, true, nil
	}
	var hb [recordHeaderSize]byte
	var data []byte
	for off := int64(headerSize); off < size; {
		if size-off < recordHeaderSize {
			return res, res.tear(f, off, size)
		}
		if _, err := io.ReadFull(br, hb[:]); err != nil {
			return res, err
		}
		h := parseRecordHeader(hb[:])
		if !h.plausible() {
			// No length to skip by. Zeros are space the file system
			// allocated but a crash left unwritten; anything else is
			// damage.
			zero, err := allZero(f, off, size)
			if err != nil || zero {
				res.tornAt, res.tornZero = off, zero
				return res, err
			}
			next, ok, err := resume(off, false)
			if !ok {
				return res, err
			}
			off = next
			continue
		}
		end := off + h.size()
		if end > size {
			// The last write of a crash, unless a record that verifies
			// follows: then the length was damaged.
			next, ok, err := resume(off, true)
			if !ok {
				return res, err
			}
			off = next
			continue
		}
		if cap(data) < int(h.length) {
			data = make([]byte, h.length)
		}
		data = data[:h.length]
		if _, err := io.ReadFull(br, data); err != nil {
			return res, err
		}
		if !h.verifies(data) {
			// The last write of a crash, if only zeros follow; otherwise
			// damage, and the length itself may be what was damaged: the
			// next record is the next that verifies, not what it says.
			zero, err := allZero(f, end, size)
			if err != nil {
				return res, err
			}
			if zero {
				return res, res.tear(f, off, size)
			}
			next, ok, err := resume(off, false)
			if !ok {
				return res, err
			}
			off = next
			continue
		}
		if err := fn(off, h, data); err != nil {
			return res, err
		}
		res.verified++
		off = end
	}
	return res, nil
}

// resyncWindow is how much of a damaged segment resync holds at once.
const resyncWindow = 4 << 20

// resync returns the first offset at or after from where a whole record
// verifies, as a write-ahead log reader finds its footing after damage, or
// -1 when none does. A record's CRC covers its length and time as well as
// its data, so damage is not taken for a record. It reads the file a window
// at a time, and a candidate record that runs past the window on its own.
func resync(f io.ReaderAt, from, size int64) (int64, error) {
	window := make([]byte, resyncWindow)
	var record []byte
	for at := from; at+recordHeaderSize <= size; {
		w := window[:min(int64(len(window)), size-at)]
		if _, err := f.ReadAt(w, at); err != nil {
			return -1, err
		}
		// Candidates whose header lies whole in this window; the next
		// window starts at the first one that does not.
		last := len(w) - recordHeaderSize
		for i := 0; i <= last; i++ {
			h := parseRecordHeader(w[i:])
			start := at + int64(i)
			if !h.plausible() || start+h.size() > size {
				continue
			}
			body := w[min(i+recordHeaderSize, len(w)):min(int64(i)+h.size(), int64(len(w)))]
			if int64(len(body)) < int64(h.length) {
				if cap(record) < int(h.length) {
					record = make([]byte, h.length)
				}
				body = record[:h.length]
				if _, err := f.ReadAt(body, start+recordHeaderSize); err != nil {
					return -1, err
				}
			}
			if h.verifies(body) {
				return start, nil
			}
		}
		at += int64(last + 1)
	}
	return -1, nil
}

// tear records a torn tail from off to the end of the file.
func (r *scanResult) tear(f io.ReaderAt, off, size int64) error {
	zero, err := allZero(f, off, size)
	r.tornAt, r.tornZero = off, zero
	return err
}

// allZero reports whether every byte of f from from to to is zero.
func allZero(f io.ReaderAt, from, to int64) (bool, error) {
	buf := make([]byte, 64<<10)
	for from < to {
		n := int64(len(buf))
		if to-from < n {
			n = to - from
		}
		if _, err := f.ReadAt(buf[:n], from); err != nil {
			return false, err
		}
		for _, c := range buf[:n] {
			if c != 0 {
				return false, nil
			}
		}
		from += n
	}
	return true, nil
}
