package spool

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// A progress file records how far a segment has been replayed: every record
// whose end is at or before its offset is in the database. It is kept apart
// from the segment so that sealed segments are never written again.
const progressSize = 20 // magic, offset, CRC

var progressMagic = [8]byte{'Q', 'S', 'P', 'R', 'O', 'G', 'R', 0}

func encodeProgress(offset int64) []byte {
	b := make([]byte, progressSize)
	copy(b[0:8], progressMagic[:])
	binary.LittleEndian.PutUint64(b[8:16], uint64(offset))
	binary.LittleEndian.PutUint32(b[16:20], crc32.Checksum(b[0:16], castagnoli))
	return b
}

// decodeProgress returns the offset, or false if b is not a progress file.
func decodeProgress(b []byte) (int64, bool) {
	if len(b) != progressSize || [8]byte(b[0:8]) != progressMagic {
		return 0, false
	}
	if binary.LittleEndian.Uint32(b[16:20]) != crc32.Checksum(b[0:16], castagnoli) {
		return 0, false
	}
	off := int64(binary.LittleEndian.Uint64(b[8:16]))
	return off, off >= 0
}

// readProgress returns the replay offset stored at path. A missing file
// means nothing is replayed. A file that does not verify also reads as 0,
// with ok false so the caller logs it: replaying a segment again is safe,
// skipping records is not.
func readProgress(fsys FS, path string) (offset int64, ok bool, err error) {
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, true, nil
	}
	if err != nil {
		return 0, false, opErr("open", filepath.Base(path), err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, progressSize+1))
	if err != nil {
		return 0, false, opErr("read", filepath.Base(path), err)
	}
	off, ok := decodeProgress(b)
	return off, ok, nil
}
