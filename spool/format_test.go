package spool

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"testing"
	"time"
)

// The bytes on disk are the ones README.md specifies, built here by hand
// from its tables, so that a change of the format cannot go unnoticed.
func TestFormatMatchesREADME(t *testing.T) {
	created := time.Unix(0, 1_700_000_000_123_456_789)
	want := []byte("QSSPOOL\x00")
	want = binary.LittleEndian.AppendUint32(want, 1)
	want = binary.LittleEndian.AppendUint64(want, uint64(created.UnixNano()))
	want = binary.LittleEndian.AppendUint32(want, crc32.Checksum(want, crc32.MakeTable(crc32.Castagnoli)))
	if got := encodeHeader(created); !bytes.Equal(got, want) || !headerVerifies(got) {
		t.Fatalf("header\n got %x\nwant %x", got, want)
	}

	data := []byte("payload")
	at := int64(1_700_000_001_000_000_000)
	var covered []byte
	covered = binary.LittleEndian.AppendUint32(covered, uint32(len(data)))
	covered = binary.LittleEndian.AppendUint64(covered, uint64(at))
	covered = append(covered, data...)
	rec := binary.LittleEndian.AppendUint32(nil, uint32(len(data)))
	rec = binary.LittleEndian.AppendUint32(rec, crc32.Checksum(covered, crc32.MakeTable(crc32.Castagnoli)))
	rec = binary.LittleEndian.AppendUint64(rec, uint64(at))
	rec = append(rec, data...)
	if got := appendRecord(nil, data, at); !bytes.Equal(got, rec) {
		t.Fatalf("record\n got %x\nwant %x", got, rec)
	}

	prog := []byte("QSPROGR\x00")
	prog = binary.LittleEndian.AppendUint64(prog, 4242)
	prog = binary.LittleEndian.AppendUint32(prog, crc32.Checksum(prog, crc32.MakeTable(crc32.Castagnoli)))
	if got := encodeProgress(4242); !bytes.Equal(got, prog) {
		t.Fatalf("progress\n got %x\nwant %x", got, prog)
	}
	if off, ok := decodeProgress(prog); !ok || off != 4242 {
		t.Fatalf("decodeProgress = %d, %v", off, ok)
	}
}

func TestNames(t *testing.T) {
	if got := segName(7); got != "00000000000000000007.seg" {
		t.Fatalf("segName(7) = %s", got)
	}
	cases := map[string]fileKind{
		"00000000000000000007.seg":          kindSegment,
		"00000000000000000007.seg.tmp":      kindSegmentTmp,
		"00000000000000000007.progress":     kindProgress,
		"00000000000000000007.progress.tmp": kindProgressTmp,
		"00000000000000000007.rescue":       kindRescue,
		"00000000000000000007.rescue.tmp":   kindRescueTmp,
		"7.seg":                             kindUnknown,
		"podA-00000000000000000007.seg":     kindUnknown,
		"0000000000000000000x.seg":          kindUnknown,
		"99999999999999999999.seg":          kindUnknown, // over uint64
	}
	for name, want := range cases {
		seq, kind := parseName(name)
		if kind != want || (want != kindUnknown && seq != 7) {
			t.Errorf("parseName(%s) = %d, %v; want kind %v", name, seq, kind, want)
		}
	}
}
