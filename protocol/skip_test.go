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

// NestsDeeperThan counts the levels of arrays and maps, however wide, without
// recursing, and refuses a value cut short.
func TestDeeperThan(t *testing.T) {
	nest := func(n int, inner []byte) []byte { return append(bytes.Repeat([]byte{0x91}, n), inner...) }
	wide, _ := msgpack.Marshal(map[string]any{"a": []any{1, 2, map[string]any{"b": []any{}}}, "c": "x"})
	for _, tc := range []struct {
		name string
		b    []byte
		max  int
		deep bool
	}{
		{"a scalar", []byte{0x01}, 0, false},
		{"an empty array", []byte{0x90}, 0, false},
		{"one level", []byte{0x91, 0x01}, 1, false},
		{"one level, none allowed", []byte{0x91, 0x01}, 0, true},
		{"wide, three levels", wide, 3, false},
		{"wide, three levels, two allowed", wide, 2, true},
		{"at the limit", nest(MaxNesting, []byte{0xc0}), MaxNesting, false},
		{"one past it", nest(MaxNesting+1, []byte{0xc0}), MaxNesting, true},
		{"millions of levels", nest(6_000_000, []byte{0xc0}), MaxNesting, true},
	} {
		deep, err := NestsDeeperThan(tc.b, tc.max)
		if err != nil || deep != tc.deep {
			t.Errorf("%s: %v, %v; want %v", tc.name, deep, err, tc.deep)
		}
	}
	if _, err := NestsDeeperThan([]byte{0x92, 0x01}, 10); err == nil {
		t.Error("an array cut short: no error")
	}
	// valueEnd passes millions of levels without recursing.
	b := nest(6_000_000, []byte{0xc0})
	if end, err := valueEnd(b, 0); err != nil || end != len(b) {
		t.Fatalf("valueEnd over 6,000,000 levels: %d, %v", end, err)
	}
}

// A request whose arguments nest too deep is a bad_request that still
// names its id; an unknown envelope key nested millions deep is skipped.
func TestDecodeRequestRefusesDeepArgs(t *testing.T) {
	deep := msgpack.RawMessage(append(bytes.Repeat([]byte{0x91}, 6_000_000), 0xc0))
	body, _ := Marshal(map[string]any{"id": 7, "op": "push", "args": map[string]any{"x": deep}})
	req, err := DecodeRequest(body)
	if err == nil || err.Code != CodeBadRequest || req.ID != 7 || !strings.Contains(err.Message, "levels deep") {
		t.Fatalf("deep args: id %d, %v", req.ID, err)
	}
	body, _ = Marshal(map[string]any{"id": 8, "op": "health", "future": deep})
	if req, err := DecodeRequest(body); err != nil || req.ID != 8 {
		t.Fatalf("deep unknown envelope key: id %d, %v", req.ID, err)
	}
}
