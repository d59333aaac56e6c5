package protocol

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

func TestFrameRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	for _, body := range [][]byte{{0x80}, bytes.Repeat([]byte{0xa1, 'x'}, 1000)} {
		if err := WriteFrame(&buf, body); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []int{1, 2000} {
		got, err := ReadFrame(&buf, nil, 4096)
		if err != nil || len(got) != want {
			t.Fatalf("read %d bytes (%v), want %d", len(got), err, want)
		}
	}
	if _, err := ReadFrame(&buf, nil, 4096); err != io.EOF {
		t.Fatalf("at a frame boundary: %v, want io.EOF", err)
	}
}

func TestFrameLengthOutOfRange(t *testing.T) {
	for _, n := range []uint32{0, 4097, 1 << 31} {
		hdr := []byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
		_, err := ReadFrame(bytes.NewReader(append(hdr, 0x80)), nil, 4096)
		if !errors.Is(err, ErrFrameTooLarge) {
			t.Fatalf("length %d: %v, want ErrFrameTooLarge", n, err)
		}
	}
}

func TestFrameCutShort(t *testing.T) {
	frame := AppendFrame(nil, []byte{0x81, 0xa1, 'a', 0x01})
	for cut := 1; cut < len(frame); cut++ {
		_, err := ReadFrame(bytes.NewReader(frame[:cut]), nil, 4096)
		if err != io.ErrUnexpectedEOF {
			t.Fatalf("cut at %d: %v, want io.ErrUnexpectedEOF", cut, err)
		}
	}
}
