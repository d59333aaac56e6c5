package queenside

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"reflect"
	"strconv"
)

// TransactionID derives a stable transaction id from what a message is (an
// order number, the id of the message it was made from...): the same parts
// always give the same id, in every client, so a push repeated, by this
// program or by its Python or Node twin, is answered duplicate instead of
// being stored again.
//
// A part is a string, a []byte or an integer of any int or uint kind (named
// types of those kinds included). Each is taken as bytes (a string as
// UTF-8, an integer in decimal ASCII, so that "1" and 1 give the same id),
// prefixed with its length as 4 big-endian bytes, and all are hashed with
// SHA-256; the id is the first 32 hex digits.
//
// No parts, or a part of any other type (a bool, a float, nil...), is a
// programming error, which no input of the running program can cause: it
// panics with a message naming the part's position (from 0) and type, as
// regexp.MustCompile does, so that the id can be used where a value is
// expected.
func TransactionID(parts ...any) string {
	if len(parts) == 0 {
		panic("queenside.TransactionID: no parts: give at least one")
	}
	h := sha256.New()
	var size [4]byte
	for i, p := range parts {
		b, ok := txidBytes(p)
		if !ok {
			panic(fmt.Sprintf("queenside.TransactionID: part %d is %s; a part is a string, a []byte or an integer", i, describe(p)))
		}
		binary.BigEndian.PutUint32(size[:], uint32(len(b)))
		h.Write(size[:])
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// txidBytes is the bytes of one part, and whether it can be one.
func txidBytes(p any) ([]byte, bool) {
	switch v := p.(type) {
	case string:
		return []byte(v), true
	case []byte:
		return v, true
	}
	rv := reflect.ValueOf(p)
	switch rv.Kind() {
	case reflect.String:
		return []byte(rv.String()), true
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.AppendInt(nil, rv.Int(), 10), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return strconv.AppendUint(nil, rv.Uint(), 10), true
	case reflect.Slice:
		if rv.Type().Elem().Kind() == reflect.Uint8 {
			return rv.Bytes(), true
		}
	}
	return nil, false
}

func describe(p any) string {
	if p == nil {
		return "nil"
	}
	return fmt.Sprintf("a %T (%v)", p, p)
}
