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
		var more int
		var err error
		if i, more, err = header(b, i); err != nil {
			return 0, err
		}
		pending += more
	}
	return i, nil
}

// MaxNesting is how deep arrays and maps may nest in a request's
// arguments, payloads included: the depth Go's encoding/json accepts, far
// beyond any document a person or program writes, and shallow enough that
// no decoder that recurses (the sidecar's, a client's, the dashboard's)
// runs out of stack on it. A deeper frame is refused before anything
// decodes its arguments (bad_request); the stream stays in step, since the
// frame was read whole.
const MaxNesting = 10_000

// NestsDeeperThan reports whether the msgpack value at the start of b nests
// arrays and maps more than max levels deep (a scalar is level 0, the
// elements of a top-level array level 1). Like valueEnd it is a loop, not
// a recursion; it keeps one count a level it is inside, so at most max.
func NestsDeeperThan(b []byte, max int) (bool, error) {
	var open []int // in each container entered, the values still to pass
	for i := 0; ; {
		next, more, err := header(b, i)
		if err != nil {
			return false, err
		}
		i = next
		if more > 0 {
			if len(open) == max {
				return true, nil
			}
			open = append(open, more)
			continue
		}
		// A value ended: so do the containers whose last value it was.
		for {
			if len(open) == 0 {
				return false, nil
			}
			if open[len(open)-1]--; open[len(open)-1] > 0 {
				break
			}
			open = open[:len(open)-1]
		}
	}
}

// header reads the header of the msgpack value at b[i], and a scalar's
// data with it: it returns the offset past them and how many values the
// value holds (an array's elements, a map's keys and values; 0 for a
// scalar), which follow it.
func header(b []byte, i int) (next, more int, err error) {
	if i >= len(b) {
		return 0, 0, errTruncated
	}
	c := b[i]
	i++
	var n int
	switch {
	case c <= 0x7f || c >= 0xe0: // positive and negative fixint
	case c <= 0x8f: // fixmap
		more = 2 * int(c&0x0f)
	case c <= 0x9f: // fixarray
		more = int(c & 0x0f)
	case c <= 0xbf: // fixstr
		n = int(c & 0x1f)
	default:
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
			return 0, 0, errors.New("invalid code 0xc1")
		}
		if err != nil {
			return 0, 0, err
		}
	}
	if i += n; i > len(b) {
		return 0, 0, errTruncated
	}
	return i, more, nil
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
