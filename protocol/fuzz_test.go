package protocol

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// seedGolden adds every golden frame (and its body) to a fuzz corpus.
func seedGolden(f *testing.F, body bool) {
	paths, _ := filepath.Glob(filepath.Join("testdata", "golden", "*.bin"))
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		if body {
			b = b[FrameHeaderSize:]
		}
		f.Add(b)
	}
}

// FuzzReadFrame: any byte stream yields frames within the limit or an
// error, never a panic or an oversized allocation.
func FuzzReadFrame(f *testing.F) {
	seedGolden(f, false)
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		for {
			body, err := ReadFrame(r, nil, 1<<16)
			if err != nil {
				return
			}
			if len(body) == 0 || len(body) > 1<<16 {
				t.Fatalf("frame of %d bytes passed the limit", len(body))
			}
		}
	})
}

// FuzzDecodeRequest: any body is a request or a bad_request, never a
// panic; a decoded request re-encodes to one that decodes the same.
func FuzzDecodeRequest(f *testing.F) {
	seedGolden(f, true)
	f.Add([]byte{0x80})
	f.Add([]byte{0xc1})
	f.Add([]byte{0x82, 0xa2, 'i', 'd', 0x01, 0xa2, 'o', 'p', 0xa0})
	// Nested past MaxNesting, in the arguments and in an unknown key.
	deep := append(bytes.Repeat([]byte{0x91}, MaxNesting+10), 0xc0)
	f.Add(append([]byte{0x83, 0xa2, 'i', 'd', 0x01, 0xa2, 'o', 'p', 0xa4, 'p', 'u', 's', 'h', 0xa4, 'a', 'r', 'g', 's', 0x81, 0xa1, 'x'}, deep...))
	f.Add(append([]byte{0x83, 0xa2, 'i', 'd', 0x01, 0xa2, 'o', 'p', 0xa0, 0xa1, 'x'}, deep...))
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := DecodeRequest(body)
		if err != nil {
			if err.Code != CodeBadRequest {
				t.Fatalf("code %s, want bad_request", err.Code)
			}
			return
		}
		again, merr := Marshal(req)
		if merr != nil {
			t.Fatal(merr)
		}
		req2, err := DecodeRequest(again)
		if err != nil || req2.ID != req.ID || req2.Op != req.Op || !bytes.Equal(req2.Args, req.Args) || req2.TimeoutMs != req.TimeoutMs {
			t.Fatalf("re-encoded request differs: %+v vs %+v (%v)", req, req2, err)
		}
	})
}

// FuzzDecodeArgs feeds any argument map to every operation's decoder, as
// the sidecar does with whatever a client sends.
func FuzzDecodeArgs(f *testing.F) {
	paths, _ := filepath.Glob(filepath.Join("testdata", "golden", "request_*.bin"))
	for _, p := range paths {
		b, _ := os.ReadFile(p)
		if req, err := DecodeRequest(b[FrameHeaderSize:]); err == nil {
			f.Add([]byte(req.Args))
		}
	}
	f.Add([]byte{0x81, 0xa5, 'i', 't', 'e', 'm', 's', 0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Add(append([]byte{0x81, 0xa1, 'x'}, append(bytes.Repeat([]byte{0x91}, MaxNesting+10), 0xc0)...))
	f.Fuzz(func(t *testing.T, raw []byte) {
		if args, err := DecodePushArgs(raw); err == nil {
			for _, it := range args.Items {
				if it.Invalid == nil && (CheckName("queue", it.Queue) != nil || CheckPartition("partition", it.Partition) != nil) {
					t.Fatalf("an invalid item passed: %+v", it)
				}
			}
		} else if e, ok := err.(*Error); !ok || e.Code != CodeInvalidArgument {
			t.Fatalf("push args: %v", err)
		}
		checkArgsError(t, func() error { _, err := DecodeConfigureArgs(raw); return err })
		checkArgsError(t, func() error { _, err := DecodeQueueArgs(raw); return err })
		_, _ = DecodeHelloArgs(raw)
	})
}

func checkArgsError(t *testing.T, decode func() error) {
	if err := decode(); err != nil {
		if e, ok := err.(*Error); !ok || e.Code != CodeInvalidArgument {
			t.Fatalf("error %v, want invalid_argument", err)
		}
	}
}
