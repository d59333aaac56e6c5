package protocol

import (
	"encoding/binary"
	"errors"
)

// errTruncated is a msgpack value that runs past the end of its frame.
var errTruncated = errors.New("truncated value")

// valueEnd returns the offset just past the msgpack value that starts at
// b[i]. It only reads headers: unlike the decoder's Skip, which reads every
// string and binary through a scratch buffer, it copies nothing, so finding
// a push's items and payloads inside the frame costs no memmove of their
// bytes. It is a loop over a count of values still to pass, not a
// recursion, so nesting depth cannot exhaust the stack, and each step
// consumes at least one byte, so it ends within len(b) steps.
func valueEnd(b []byte, i int) (int, error) {
	for pending := 1; pending > 0; pending-- {
		if i >= len(b) {
			return 0, errTruncated
		}
		c := b[i]
		i++
		switch {
		case c <= 0x7f || c >= 0xe0: // positive and negative fixint
		case c <= 0x8f: // fixmap
			pending += 2 * int(c&0x0f)
		case c <= 0x9f: // fixarray
			pending += int(c & 0x0f)
		case c <= 0xbf: // fixstr
			i += int(c & 0x1f)
		default:
			var n, more int
			var err error
			switch c {
			case 0xc0, 0xc2, 0xc3: // nil, false, true
			case 0xc4, 0xd9: // bin 8, str 8
				n, i, err = length(b, i, 1)
			case 0xc5, 0xda: // bin 16, str 16
				n, i, err = length(b, i, 2)
			case 0xc6, 0xdb: // bin 32, str 32
				n, i, err = length(b, i, 4)
			case 0xc7: // ext 8: length, type, data
				n, i, err = length(b, i, 1)
				n++
			case 0xc8: // ext 16
				n, i, err = length(b, i, 2)
				n++
			case 0xc9: // ext 32
				n, i, err = length(b, i, 4)
				n++
			case 0xcc, 0xd0: // uint 8, int 8
				n = 1
			case 0xcd, 0xd1: // uint 16, int 16
				n = 2
			case 0xca, 0xce, 0xd2: // float 32, uint 32, int 32
				n = 4
			case 0xcb, 0xcf, 0xd3: // float 64, uint 64, int 64
				n = 8
			case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext 1, 2, 4, 8, 16: type and data
				n = 1 + 1<<(c-0xd4)
			case 0xdc: // array 16
				more, i, err = length(b, i, 2)
			case 0xdd: // array 32
				more, i, err = length(b, i, 4)
			case 0xde: // map 16
				more, i, err = length(b, i, 2)
				more *= 2
			case 0xdf: // map 32
				more, i, err = length(b, i, 4)
				more *= 2
			default: // 0xc1 is never used
				return 0, errors.New("invalid code 0xc1")
			}
			if err != nil {
				return 0, err
			}
			i += n
			pending += more
		}
	}
	if i > len(b) {
		return 0, errTruncated
	}
	return i, nil
}

// length reads a big-endian length of size bytes at b[i].
func length(b []byte, i, size int) (int, int, error) {
	if len(b)-i < size {
		return 0, 0, errTruncated
	}
	switch size {
	case 1:
		return int(b[i]), i + 1, nil
	case 2:
		return int(binary.BigEndian.Uint16(b[i:])), i + 2, nil
	default:
		return int(binary.BigEndian.Uint32(b[i:])), i + 4, nil
	}
}
