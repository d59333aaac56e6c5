package protocol

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"strconv"
	"time"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// The helpers below read argument maps strictly: a value of the wrong type
// is an invalid_argument naming the field, never a silent zero. A nil value
// counts as an omitted key.

func isMapCode(c byte) bool {
	return msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32
}

func isArrayCode(c byte) bool {
	return msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32
}

func isIntCode(c byte) bool {
	return msgpcode.IsFixedNum(c) || (c >= msgpcode.Uint8 && c <= msgpcode.Int64)
}

// mapLen reads a map header; -1 means nil.
func mapLen(d *dec) (int, error) {
	c, err := d.PeekCode()
	if err != nil {
		return 0, err
	}
	if !isMapCode(c) && c != msgpcode.Nil {
		return 0, fmt.Errorf("not a map")
	}
	return d.DecodeMapLen()
}

func readKey(d *dec) (string, error) {
	c, err := d.PeekCode()
	if err != nil {
		return "", fmt.Errorf("truncated map")
	}
	if !msgpcode.IsString(c) {
		return "", fmt.Errorf("map keys must be strings")
	}
	return d.DecodeString()
}

func readUint(d *dec) (uint64, error) {
	c, err := d.PeekCode()
	if err != nil {
		return 0, err
	}
	if !isIntCode(c) {
		_ = d.Skip()
		return 0, fmt.Errorf("not an integer")
	}
	if c == msgpcode.Uint64 {
		return d.DecodeUint64()
	}
	v, err := d.DecodeInt64()
	if err != nil || v < 0 {
		return 0, fmt.Errorf("not a non-negative integer")
	}
	return uint64(v), nil
}

func invalid(field, format string, args ...any) *Error {
	return Errorf(CodeInvalidArgument, "%s: %s", field, fmt.Sprintf(format, args...))
}

// prefixed names the map an argument error came from: "pop.batch: ...".
func prefixed(field string, err error) error {
	if pe, ok := err.(*Error); ok {
		return Errorf(pe.Code, "%s.%s", field, pe.Message)
	}
	return err
}

// nilIsValue names the keys whose nil is a real value rather than an
// omission: a payload may be any msgpack value, nil included.
var nilIsValue = map[string]bool{"payload": true}

// dec decodes msgpack held in memory. Its raw hands out the encoding of
// the next value as a sub-slice of that memory, without copying: payloads
// travel from the request frame to PostgreSQL untouched.
type dec struct {
	*msgpack.Decoder
	r   bytes.Reader
	buf []byte
}

func newDec(buf []byte) *dec {
	x := &dec{buf: buf}
	x.r.Reset(buf)
	x.Decoder = msgpack.NewDecoder(&x.r)
	return x
}

// reset makes x decode buf, reusing its allocations.
func (x *dec) reset(buf []byte) {
	x.buf = buf
	x.r.Reset(buf)
	x.Decoder.Reset(&x.r)
}

func (x *dec) pos() int { return len(x.buf) - x.r.Len() }

// Skip passes the next value as raw does. It hides the decoder's own Skip,
// which recurses into arrays and maps: a value nested a few million levels
// deep would exhaust the stack and end the process.
func (x *dec) Skip() error {
	_, err := x.raw()
	return err
}

// raw returns the encoding of the next value, a sub-slice of the input:
// nothing is copied.
func (x *dec) raw() ([]byte, error) {
	start := x.pos()
	end, err := valueEnd(x.buf, start)
	if err != nil {
		return nil, err
	}
	if _, err := x.r.Seek(int64(end-start), io.SeekCurrent); err != nil {
		return nil, err
	}
	return x.buf[start:end:end], nil
}

// walkMap calls fn for every non-nil value of the map encoded in raw. An
// empty raw is an empty map.
func walkMap(raw []byte, what string, fn func(d *dec, key string) error) error {
	if len(raw) == 0 {
		return nil
	}
	return walkMapWith(newDec(raw), raw, what, fn)
}

// walkMapWith is walkMap reusing the decoder d.
func walkMapWith(d *dec, raw []byte, what string, fn func(d *dec, key string) error) error {
	d.reset(raw)
	if err := walkMapFrom(d, what, fn); err != nil {
		return err
	}
	if d.r.Len() != 0 {
		return invalid(what, "trailing bytes")
	}
	return nil
}

func walkMapFrom(d *dec, what string, fn func(d *dec, key string) error) error {
	n, err := mapLen(d)
	if err != nil {
		return invalid(what, "expected a map")
	}
	for i := 0; i < n; i++ {
		key, err := readKey(d)
		if err != nil {
			return invalid(what, "%v", err)
		}
		if c, err := d.PeekCode(); err != nil {
			return invalid(what, "truncated")
		} else if c == msgpcode.Nil && !nilIsValue[key] {
			_ = d.Skip()
			continue
		}
		if err := fn(d, key); err != nil {
			return err
		}
	}
	return nil
}

// skipField ignores a key the operation does not know, for forward compatibility.
func skipField(d *dec, field string) error {
	if err := d.Skip(); err != nil {
		return invalid(field, "malformed value")
	}
	return nil
}

func readString(d *dec, field string) (string, error) {
	if c, _ := d.PeekCode(); !msgpcode.IsString(c) {
		_ = d.Skip()
		return "", invalid(field, "expected a string")
	}
	s, err := d.DecodeString()
	if err != nil {
		return "", invalid(field, "malformed string")
	}
	return s, nil
}

func readInt(d *dec, field string, min, max int64) (int64, error) {
	c, _ := d.PeekCode()
	if !isIntCode(c) {
		_ = d.Skip()
		return 0, invalid(field, "expected an integer")
	}
	var v int64
	if c == msgpcode.Uint64 {
		u, err := d.DecodeUint64()
		if err != nil {
			return 0, invalid(field, "malformed integer")
		}
		if u > math.MaxInt64 {
			return 0, invalid(field, "out of range %d..%d", min, max)
		}
		v = int64(u)
	} else {
		var err error
		if v, err = d.DecodeInt64(); err != nil {
			return 0, invalid(field, "malformed integer")
		}
	}
	if v < min || v > max {
		return 0, invalid(field, "%d out of range %d..%d", v, min, max)
	}
	return v, nil
}

func readBool(d *dec, field string) (bool, error) {
	if c, _ := d.PeekCode(); c != msgpcode.True && c != msgpcode.False {
		_ = d.Skip()
		return false, invalid(field, "expected a boolean")
	}
	return d.DecodeBool()
}

// readTime accepts a msgpack timestamp, an RFC 3339 string, or integer
// milliseconds since the epoch.
func readTime(d *dec, field string) (time.Time, error) {
	c, _ := d.PeekCode()
	switch {
	case msgpcode.IsExt(c):
		t, err := d.DecodeTime()
		if err != nil {
			return time.Time{}, invalid(field, "expected a timestamp extension")
		}
		return t, nil
	case msgpcode.IsString(c):
		s, _ := d.DecodeString()
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return time.Time{}, invalid(field, "expected an RFC 3339 time, got %s", strconv.Quote(s))
		}
		return t, nil
	case isIntCode(c):
		ms, err := readInt(d, field, math.MinInt64, math.MaxInt64)
		if err != nil {
			return time.Time{}, err
		}
		return time.UnixMilli(ms), nil
	}
	_ = d.Skip()
	return time.Time{}, invalid(field, "expected a time (timestamp, RFC 3339 string or epoch milliseconds)")
}

// readArrayLen reads an array header of at most max elements.
func readArrayLen(d *dec, field string, max int) (int, error) {
	if c, _ := d.PeekCode(); !isArrayCode(c) {
		_ = d.Skip()
		return 0, invalid(field, "expected an array")
	}
	n, err := d.DecodeArrayLen()
	if err != nil {
		return 0, invalid(field, "malformed array")
	}
	if n > max {
		return 0, invalid(field, "%d elements, at most %d allowed", n, max)
	}
	return n, nil
}

func readStringMap(d *dec, field string, maxEntries int) (map[string]string, error) {
	c, _ := d.PeekCode()
	if !isMapCode(c) {
		_ = d.Skip()
		return nil, invalid(field, "expected a map of strings")
	}
	n, err := d.DecodeMapLen()
	if err != nil {
		return nil, invalid(field, "malformed map")
	}
	if n > maxEntries {
		return nil, invalid(field, "%d entries, at most %d allowed", n, maxEntries)
	}
	m := make(map[string]string, n)
	for i := 0; i < n; i++ {
		k, err := readString(d, field+" key")
		if err != nil {
			return nil, err
		}
		v, err := readString(d, field+"."+k)
		if err != nil {
			return nil, err
		}
		m[k] = v
	}
	return m, nil
}
