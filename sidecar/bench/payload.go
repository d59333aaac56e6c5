package bench

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	queenside "github.com/queenside/queenside/clients/go"
)

// payloads makes message bodies: a msgpack bin of a fixed size whose first
// 8 bytes are the push time (UnixNano, big-endian), so that a consumer can
// tell how long a message took to reach it. The encoding is made once and
// copied, since only those 8 bytes differ between messages.
type payloads struct {
	encoded []byte // the whole msgpack value, time bytes zero
	at      int    // where the bin's data, and so the time, begins
}

func newPayloads(size int) (payloads, error) {
	raw, err := queenside.Payload(make([]byte, size))
	if err != nil {
		return payloads{}, fmt.Errorf("encode a %d-byte payload: %w", size, err)
	}
	return payloads{encoded: raw, at: len(raw) - size}, nil
}

// stamped returns a payload carrying t.
func (p payloads) stamped(t time.Time) msgpack.RawMessage {
	b := make([]byte, len(p.encoded))
	copy(b, p.encoded)
	binary.BigEndian.PutUint64(b[p.at:], uint64(t.UnixNano()))
	return b
}

// sentAt reads the push time back from a delivered payload. It reads the
// bin header itself rather than decoding, so the body is not copied; a
// payload of another shape has no time.
func sentAt(raw []byte) (time.Time, bool) {
	if len(raw) < 2 {
		return time.Time{}, false
	}
	var at, n int
	switch raw[0] {
	case 0xc4: // bin 8
		at, n = 2, int(raw[1])
	case 0xc5: // bin 16
		if len(raw) < 3 {
			return time.Time{}, false
		}
		at, n = 3, int(binary.BigEndian.Uint16(raw[1:]))
	case 0xc6: // bin 32
		if len(raw) < 5 {
			return time.Time{}, false
		}
		at, n = 5, int(binary.BigEndian.Uint32(raw[1:]))
	default:
		return time.Time{}, false
	}
	if n < 8 || len(raw) < at+8 {
		return time.Time{}, false
	}
	return time.Unix(0, int64(binary.BigEndian.Uint64(raw[at:]))), true
}
