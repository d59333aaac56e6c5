package protocol

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Limits of the value conventions.
const (
	MaxNameBytes          = 200
	MaxPartitionBytes     = 200
	MaxTransactionIDBytes = 256
	MaxTraceIDBytes       = 256
	MaxHeaders            = 64
	MaxPushItems          = 10000
	DefaultPartition      = "Default"
)

// CheckName validates a queue or group name: 1..200 bytes of [A-Za-z0-9._:-].
func CheckName(field, s string) error {
	if len(s) == 0 || len(s) > MaxNameBytes {
		return invalid(field, "must be 1..%d bytes, got %d", MaxNameBytes, len(s))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '.' || c == '_' || c == ':' || c == '-'
		if !ok {
			return invalid(field, "%q has a character outside [A-Za-z0-9._:-]", s)
		}
	}
	return nil
}

// CheckPartition validates a partition name: 1..200 bytes of UTF-8 without
// control characters.
func CheckPartition(field, s string) error {
	if len(s) == 0 || len(s) > MaxPartitionBytes {
		return invalid(field, "must be 1..%d bytes, got %d", MaxPartitionBytes, len(s))
	}
	if !utf8.ValidString(s) {
		return invalid(field, "is not valid UTF-8")
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return invalid(field, "contains a control character")
		}
	}
	return nil
}

// CheckTransactionID validates a transaction id: 1..256 bytes of text.
func CheckTransactionID(field, s string) error {
	if len(s) == 0 || len(s) > MaxTransactionIDBytes {
		return invalid(field, "must be 1..%d bytes, got %d", MaxTransactionIDBytes, len(s))
	}
	return CheckText(field, s)
}

// CheckText validates a string stored as text: UTF-8 (as msgpack strings
// are meant to be) without NUL, which PostgreSQL text cannot hold.
func CheckText(field, s string) error {
	if !utf8.ValidString(s) {
		return invalid(field, "is not valid UTF-8")
	}
	if strings.IndexByte(s, 0) >= 0 {
		return invalid(field, "contains a NUL character")
	}
	return nil
}
