package spool

import (
	"bytes"
	"testing"
)

// FuzzScanRecords feeds arbitrary bytes after a valid header to the
// recovery scan: it must not panic, every record it accepts must verify,
// and what it reports must lie inside the file.
func FuzzScanRecords(f *testing.F) {
	valid := appendRecord(appendRecord(nil, []byte("hello"), 1), []byte("world"), 2)
	f.Add(valid)
	f.Add(append(bytes.Clone(valid), make([]byte, 40)...))
	f.Add(valid[:len(valid)-3])
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13})
	f.Fuzz(func(t *testing.T, body []byte) {
		file := append(encodeHeader(newClock().Now()), body...)
		size := int64(len(file))
		last := int64(headerSize)
		res, err := scanRecords(bytes.NewReader(file), size, func(start int64, h recordHeader, data []byte) error {
			if start < last || start+h.size() > size || !h.verifies(data) {
				t.Fatalf("accepted a record at %d that does not verify or overlaps", start)
			}
			last = start + h.size()
			return nil
		})
		if err != nil {
			t.Fatalf("scan: %v", err)
		}
		if res.tornAt >= 0 && (res.tornAt < last || res.tornAt > size) {
			t.Fatalf("torn tail at %d outside [%d, %d]", res.tornAt, last, size)
		}
		for _, b := range res.bad {
			if b.from < headerSize || b.to <= b.from || b.to > size {
				t.Fatalf("bad bytes [%d, %d) outside the file of %d", b.from, b.to, size)
			}
		}
	})
}
