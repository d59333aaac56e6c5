package spool

import (
	"encoding/binary"
	"hash/crc32"
	"time"
)

// The on-disk format. README.md is its specification; change both together.
const (
	// formatVersion is written in every segment header. A reader refuses
	// any other version rather than guess at its layout.
	formatVersion = 1

	headerSize       = 24 // magic, version, creation time, CRC
	recordHeaderSize = 16 // length, CRC, append time

	// MaxRecordBytes is the largest record. It also bounds a length field
	// read from disk: a larger one cannot be a record the spool wrote.
	MaxRecordBytes = 64 << 20
)

var (
	segmentMagic = [8]byte{'Q', 'S', 'S', 'P', 'O', 'O', 'L', 0}
	castagnoli   = crc32.MakeTable(crc32.Castagnoli)
)

// encodeHeader returns a segment header stamped with its creation time.
func encodeHeader(created time.Time) []byte {
	b := make([]byte, headerSize)
	copy(b[0:8], segmentMagic[:])
	binary.LittleEndian.PutUint32(b[8:12], formatVersion)
	binary.LittleEndian.PutUint64(b[12:20], uint64(created.UnixNano()))
	binary.LittleEndian.PutUint32(b[20:24], crc32.Checksum(b[0:20], castagnoli))
	return b
}

// headerVerifies reports whether b is a segment header this version reads.
func headerVerifies(b []byte) bool {
	if len(b) < headerSize || [8]byte(b[0:8]) != segmentMagic {
		return false
	}
	if binary.LittleEndian.Uint32(b[8:12]) != formatVersion {
		return false
	}
	return binary.LittleEndian.Uint32(b[20:24]) == crc32.Checksum(b[0:20], castagnoli)
}

// recordHeader is the fixed part in front of every record's data.
type recordHeader struct {
	length uint32 // bytes of data
	crc    uint32 // over the length, the time and the data
	at     int64  // append time, Unix nanoseconds
}

func parseRecordHeader(b []byte) recordHeader {
	return recordHeader{
		length: binary.LittleEndian.Uint32(b[0:4]),
		crc:    binary.LittleEndian.Uint32(b[4:8]),
		at:     int64(binary.LittleEndian.Uint64(b[8:16])),
	}
}

// plausible reports whether the length could belong to a record the spool
// wrote. Zero never does, so zero-filled space is never taken for a record.
func (h recordHeader) plausible() bool {
	return h.length >= 1 && h.length <= MaxRecordBytes
}

// size is the record's bytes on disk, header included.
func (h recordHeader) size() int64 { return recordHeaderSize + int64(h.length) }

// verifies reports whether data is the record's data, intact.
func (h recordHeader) verifies(data []byte) bool {
	return uint32(len(data)) == h.length && recordCRC(h.length, h.at, data) == h.crc
}

// recordCRC covers the length and the time as well as the data, so a torn
// or flipped header is caught like damaged data.
func recordCRC(length uint32, at int64, data []byte) uint32 {
	var b [12]byte
	binary.LittleEndian.PutUint32(b[0:4], length)
	binary.LittleEndian.PutUint64(b[4:12], uint64(at))
	return crc32.Update(crc32.Checksum(b[:], castagnoli), castagnoli, data)
}

// appendRecord appends one encoded record to dst.
func appendRecord(dst, data []byte, at int64) []byte {
	var h [recordHeaderSize]byte
	length := uint32(len(data))
	binary.LittleEndian.PutUint32(h[0:4], length)
	binary.LittleEndian.PutUint32(h[4:8], recordCRC(length, at, data))
	binary.LittleEndian.PutUint64(h[8:16], uint64(at))
	return append(append(dst, h[:]...), data...)
}

// checkRecordSizes refuses a batch holding a record the format cannot carry.
func checkRecordSizes(records [][]byte) error {
	for _, r := range records {
		if len(r) < 1 || len(r) > MaxRecordBytes {
			return ErrRecordSize
		}
	}
	return nil
}

// encodeRecords encodes a batch, all stamped with the same append time.
func encodeRecords(records [][]byte, at int64) []byte {
	n := 0
	for _, r := range records {
		n += recordHeaderSize + len(r)
	}
	buf := make([]byte, 0, n)
	for _, r := range records {
		buf = appendRecord(buf, r, at)
	}
	return buf
}
