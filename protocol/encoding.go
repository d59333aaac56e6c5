package protocol

import (
	"bytes"
	"io"

	"github.com/vmihailenco/msgpack/v5"
)

// newEncoder returns an encoder with the canonical settings shared by every
// queenside implementation: integers in their most compact form, as the
// Python and Node msgpack libraries write them, so that golden frames compare
// byte for byte across languages.
func newEncoder(w io.Writer) *msgpack.Encoder {
	e := msgpack.NewEncoder(w)
	e.UseCompactInts(true)
	return e
}

// Marshal encodes v canonically.
func Marshal(v any) ([]byte, error) {
	return Append(nil, v)
}

// Append appends the canonical encoding of v to dst.
func Append(dst []byte, v any) ([]byte, error) {
	buf := bytes.NewBuffer(dst)
	if err := newEncoder(buf).Encode(v); err != nil {
		return dst, err
	}
	return buf.Bytes(), nil
}

// Unmarshal decodes data into v.
func Unmarshal(data []byte, v any) error {
	return msgpack.Unmarshal(data, v)
}
