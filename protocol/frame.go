package protocol

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// ErrFrameTooLarge is returned for a frame whose length is zero or above the
// limit. The framing can no longer be trusted, so the connection must close.
var ErrFrameTooLarge = errors.New("protocol: frame length out of range")

// FrameHeaderSize is the size of the big-endian length prefix.
const FrameHeaderSize = 4

// ReadFrame reads one frame and returns its body, reusing buf when it is
// large enough. It returns io.EOF only at a frame boundary; a frame cut short
// is io.ErrUnexpectedEOF.
func ReadFrame(r io.Reader, buf []byte, maxBytes int) ([]byte, error) {
	n, err := ReadFrameHeader(r, maxBytes)
	if err != nil {
		return nil, err
	}
	return ReadFrameBody(r, buf, n)
}

// ReadFrameHeader reads a frame's length prefix: the size of the body that
// follows, 1 to maxBytes, or ErrFrameTooLarge.
func ReadFrameHeader(r io.Reader, maxBytes int) (int, error) {
	var hdr [FrameHeaderSize]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 || uint64(n) > uint64(maxBytes) {
		return 0, fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, n, maxBytes)
	}
	return int(n), nil
}

// ReadFrameBody reads a body of n bytes, into buf when it has room.
func ReadFrameBody(r io.Reader, buf []byte, n int) ([]byte, error) {
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return buf, nil
}

// AppendFrame appends body to dst behind its length prefix.
func AppendFrame(dst, body []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(body)))
	return append(dst, body...)
}

// WriteFrame writes body as one frame.
func WriteFrame(w io.Writer, body []byte) error {
	var hdr [FrameHeaderSize]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(len(body)))
	if _, err := w.Write(hdr[:]); err != nil {
		return err
	}
	_, err := w.Write(body)
	return err
}
