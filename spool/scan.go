package spool

import (
	"bufio"
	"io"
)

// scanResult is what a scan of a segment's records found. README.md,
// "Recovery on Open" step 4.2, gives the rules.
type scanResult struct {
	verified int     // records whose CRC holds
	bad      []int64 // offsets of records that are bad; the segment does not verify
	tornAt   int64   // where a torn tail starts, or -1 when there is none
	tornZero bool    // every byte of the torn tail is zero
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
			// No length to skip by: what follows cannot be found. Zeros
			// are space the file system allocated but a crash left
			// unwritten; anything else is damage.
			zero, err := allZero(f, off, size)
			if err != nil {
				return res, err
			}
			if zero {
				res.tornAt, res.tornZero = off, true
			} else {
				res.bad = append(res.bad, off)
			}
			return res, nil
		}
		end := off + h.size()
		if end > size {
			return res, res.tear(f, off, size)
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
			// damage in the middle, and the records after it may be intact.
			zero, err := allZero(f, end, size)
			if err != nil {
				return res, err
			}
			if zero {
				return res, res.tear(f, off, size)
			}
			res.bad = append(res.bad, off)
			off = end
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
