package crypt

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
)

// Sealed payload layout (what Seal returns, what Open takes):
//
//	version (1 byte, = 1) || nonce (12 bytes) || AES-256-GCM ciphertext || tag (16 bytes)
//
// The key id is not part of it: it is stored beside the payload (its own
// column in PostgreSQL, PackRecord in the spool), because a reader must know
// which key to use before it can check anything.
//
// The additional data authenticated with every payload is
//
//	version (1 byte) || len(queue) (4 bytes, big endian) || queue || message id (16 bytes)
//
// The length prefix keeps (queue, id) pairs from running into each other, and
// binding the id means a ciphertext copied onto another message, or into
// another queue, fails to open instead of being delivered as that message.
//
// Nonces are random, 96 bits, one per Seal. That is safe for about 2^32
// payloads per key, which is one reason to rotate keys now and then.
const (
	version   = 1
	nonceSize = 12
	tagSize   = 16

	// Overhead is how many bytes Seal adds to a payload.
	Overhead = 1 + nonceSize + tagSize
)

// ErrKeyMissing is returned when the key a payload needs (or, for Seal, any
// writing key) is not in the ring. Protocol error code: key_missing. The
// stored payload is intact; a sidecar given the key can still read it.
var ErrKeyMissing = errors.New("encryption key missing")

// ErrTampered is returned when a sealed payload fails authentication: it was
// altered, truncated, or belongs to another queue or message.
var ErrTampered = errors.New("sealed payload failed authentication")

// Seal encrypts plaintext for message messageID of queue under the writing
// key and returns that key's id and the sealed bytes. A uuid.UUID can be
// passed as messageID directly.
func (r *Keyring) Seal(plaintext []byte, queue string, messageID [16]byte) (keyID string, sealed []byte, err error) {
	s := r.set()
	if s == nil {
		return "", nil, ErrKeyMissing
	}
	aead := s.aeads[s.writer]
	out := make([]byte, 1+nonceSize, Overhead+len(plaintext))
	out[0] = version
	nonce := out[1 : 1+nonceSize]
	if _, err := rand.Read(nonce); err != nil {
		return "", nil, err
	}
	return s.writer, aead.Seal(out, nonce, plaintext, additionalData(queue, messageID)), nil
}

// Open decrypts a payload sealed under keyID for message messageID of queue.
func (r *Keyring) Open(keyID string, sealed []byte, queue string, messageID [16]byte) ([]byte, error) {
	aead, ok := r.aead(keyID)
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrKeyMissing, keyID)
	}
	if len(sealed) < Overhead || sealed[0] != version {
		return nil, ErrTampered
	}
	nonce, ct := sealed[1:1+nonceSize], sealed[1+nonceSize:]
	pt, err := aead.Open(make([]byte, 0, len(ct)-tagSize), nonce, ct, additionalData(queue, messageID))
	if err != nil {
		return nil, ErrTampered
	}
	return pt, nil
}

func additionalData(queue string, messageID [16]byte) []byte {
	ad := make([]byte, 0, 1+4+len(queue)+16)
	ad = append(ad, version)
	ad = binary.BigEndian.AppendUint32(ad, uint32(len(queue)))
	ad = append(ad, queue...)
	return append(ad, messageID[:]...)
}

// Packed record layout (PackRecord), for stores with a single payload field
// such as the spool record:
//
//	0xc1 || 1 (pack version) || len(keyID) (1 byte, 1..64) || keyID || sealed
//
// 0xc1 is the one byte msgpack never uses, so no valid msgpack payload (which
// is what clients push) can be mistaken for a packed one: IsPacked is a
// reliable test even on records written before a queue was encrypted.
const (
	packMarker  = 0xc1
	packVersion = 1
)

// PackRecord joins a key id and sealed payload into one self-describing blob.
// keyID must be one Seal returned.
func PackRecord(keyID string, sealed []byte) []byte {
	if !validID([]byte(keyID)) {
		panic("crypt: PackRecord with an invalid key id")
	}
	out := make([]byte, 0, 3+len(keyID)+len(sealed))
	out = append(out, packMarker, packVersion, byte(len(keyID)))
	out = append(out, keyID...)
	return append(out, sealed...)
}

// IsPacked reports whether b was made by PackRecord (as opposed to a
// plaintext msgpack payload).
func IsPacked(b []byte) bool {
	return len(b) > 0 && b[0] == packMarker
}

// UnpackRecord splits a PackRecord blob. sealed aliases blob. A malformed
// blob is reported as ErrTampered.
func UnpackRecord(blob []byte) (keyID string, sealed []byte, err error) {
	if len(blob) < 3 || blob[0] != packMarker || blob[1] != packVersion {
		return "", nil, fmt.Errorf("%w: not a packed record", ErrTampered)
	}
	n := int(blob[2])
	if n == 0 || n > MaxKeyIDLen || len(blob) < 3+n {
		return "", nil, fmt.Errorf("%w: bad key id in packed record", ErrTampered)
	}
	return string(blob[3 : 3+n]), blob[3+n:], nil
}

// SealRecord is Seal followed by PackRecord.
func (r *Keyring) SealRecord(plaintext []byte, queue string, messageID [16]byte) ([]byte, error) {
	id, sealed, err := r.Seal(plaintext, queue, messageID)
	if err != nil {
		return nil, err
	}
	return PackRecord(id, sealed), nil
}

// OpenRecord is UnpackRecord followed by Open.
func (r *Keyring) OpenRecord(blob []byte, queue string, messageID [16]byte) ([]byte, error) {
	id, sealed, err := UnpackRecord(blob)
	if err != nil {
		return nil, err
	}
	return r.Open(id, sealed, queue, messageID)
}
