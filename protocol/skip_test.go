package protocol

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// valueEnd agrees with the decoder's Skip on every kind of value, whole
// and cut short anywhere.
func TestValueEndAgreesWithSkip(t *testing.T) {
	values := []any{
		nil, true, false, 0, 127, -1, -32, -33, 200, 40000, -40000, 1 << 40, -(1 << 40), uint64(1 << 63),
		float32(1.5), 2.5, "", strings.Repeat("s", 31), strings.Repeat("s", 32), strings.Repeat("s", 256),
		strings.Repeat("s", 70000), []byte{}, []byte("bin"), bytes.Repeat([]byte{1}, 300), bytes.Repeat([]byte{2}, 70000),
		time.Unix(1, 0), time.Unix(1, 5), time.Unix(1<<40, 5), []any{}, make([]any, 15), make([]any, 16), make([]any, 70000),
		map[string]any{"a": map[string]any{"b": []any{1, "x", nil, map[string]any{}}}},
		map[string]any{"items": []any{map[string]any{"queue": "q", "payload": map[string]any{"n": 1}}}},
	}
	big := map[string]int{}
	for i := 0; i < 20; i++ {
		big[strings.Repeat("k", i+1)] = i
	}
	values = append(values, big)
	for i, v := range values {
		enc, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		framed := append([]byte{0xa1, 'x'}, append(enc, 0xc3)...) // something before and after
		end, err := valueEnd(framed, 2)
		if err != nil || end != 2+len(enc) {
			t.Fatalf("value %d (%T): end %d, %v; want %d", i, v, end, err, 2+len(enc))
		}
		for cut := 0; cut < len(enc); cut += 1 + len(enc)/200 {
			if _, err := valueEnd(enc[:cut], 0); err == nil {
				t.Fatalf("value %d cut at %d of %d: no error", i, cut, len(enc))
			}
			if msgpack.NewDecoder(bytes.NewReader(enc[:cut])).Skip() == nil {
				t.Fatalf("value %d cut at %d: Skip found no error either; the test is wrong", i, cut)
			}
		}
	}
	if _, err := valueEnd([]byte{0xc1}, 0); err == nil {
		t.Fatal("0xc1 accepted")
	}
	// A header promising more than the frame holds ends in an error, fast.
	if _, err := valueEnd([]byte{0xdd, 0xff, 0xff, 0xff, 0xff, 0xc0}, 0); err == nil {
		t.Fatal("array 32 of 4 billion values accepted")
	}
}
