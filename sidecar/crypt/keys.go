// Package crypt seals message payloads of queues configured with
// encryptPayloads, so that neither PostgreSQL nor the pod's disk spool ever
// holds their plaintext.
//
// Keys come from the file named by --encryption-keys: one key a line,
// "<id>:<base64 of 32 bytes>", '#' starting a comment line, blank lines
// ignored. The first key seals new payloads; every listed key opens. An
// operator rotates by putting a new key first and sending SIGHUP (Reload);
// payloads sealed under an older key stay readable as long as it is listed.
//
// Errors from this package name line numbers and key ids, never key bytes,
// so they are safe to log and to return to clients.
package crypt

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
)

// KeySize is the length of every key: AES-256.
const KeySize = 32

// MaxKeyIDLen bounds key ids; the id is stored next to every sealed payload.
const MaxKeyIDLen = 64

// keySet is one parsed key file. It is never modified after parsing, so a
// Keyring can swap whole sets atomically and readers need no lock.
type keySet struct {
	writer string                 // id of the first key in the file
	ids    []string               // file order
	aeads  map[string]cipher.AEAD // cipher.AEAD from crypto/aes is safe for concurrent use
}

// Keyring holds the keys currently in force. It is safe for concurrent use.
// The zero value and a nil *Keyring hold no keys: Seal and Open then answer
// ErrKeyMissing, which is what a sidecar started without --encryption-keys
// must answer for an encrypted queue.
type Keyring struct {
	cur atomic.Pointer[keySet]
}

// Load reads and parses a key file.
func Load(path string) (*Keyring, error) {
	r := new(Keyring)
	if err := r.Reload(path); err != nil {
		return nil, err
	}
	return r, nil
}

// Parse parses the contents of a key file.
func Parse(data []byte) (*Keyring, error) {
	set, err := parse(data)
	if err != nil {
		return nil, err
	}
	r := new(Keyring)
	r.cur.Store(set)
	return r, nil
}

// Reload replaces the keys with those in path. On any error the keys in
// force stay as they were, so a mistyped file on SIGHUP cannot stop a
// running sidecar from reading what it stored.
func (r *Keyring) Reload(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("encryption keys: %w", err)
	}
	set, err := parse(data)
	clear(data) // the file's key bytes need not outlive the parse
	if err != nil {
		return fmt.Errorf("encryption keys %s: %w", path, err)
	}
	r.cur.Store(set)
	return nil
}

// WriterID is the id of the key new payloads are sealed under, "" when the
// ring is empty.
func (r *Keyring) WriterID() string {
	if s := r.set(); s != nil {
		return s.writer
	}
	return ""
}

// IDs lists the key ids in force, the writing key first. For logs.
func (r *Keyring) IDs() []string {
	if s := r.set(); s != nil {
		return append([]string(nil), s.ids...)
	}
	return nil
}

// Has reports whether the ring can open payloads sealed under id.
func (r *Keyring) Has(id string) bool {
	_, ok := r.aead(id)
	return ok
}

func (r *Keyring) set() *keySet {
	if r == nil {
		return nil
	}
	return r.cur.Load()
}

func (r *Keyring) aead(id string) (cipher.AEAD, bool) {
	s := r.set()
	if s == nil {
		return nil, false
	}
	a, ok := s.aeads[id]
	return a, ok
}

// parse turns a key file into a keySet. Messages say which line is wrong and
// how, but never quote the line: it may hold a key.
func parse(data []byte) (*keySet, error) {
	set := &keySet{aeads: map[string]cipher.AEAD{}}
	firstLine := map[string]int{}
	for n, line := range bytes.Split(data, []byte("\n")) {
		lineNo := n + 1
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		id, enc, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return nil, fmt.Errorf("line %d: want <id>:<base64 key>", lineNo)
		}
		id, enc = bytes.TrimSpace(id), bytes.TrimSpace(enc)
		if !validID(id) {
			return nil, fmt.Errorf("line %d: key id must be 1..%d characters of [A-Za-z0-9._-]", lineNo, MaxKeyIDLen)
		}
		if first, dup := firstLine[string(id)]; dup {
			return nil, fmt.Errorf("line %d: key id %q already used on line %d", lineNo, id, first)
		}
		key := make([]byte, base64.StdEncoding.DecodedLen(len(enc)))
		kn, err := base64.StdEncoding.Decode(key, enc)
		if err != nil {
			// The decoder's own error is only an offset, but quoting
			// nothing is simpler to keep true.
			return nil, fmt.Errorf("line %d: key %q is not valid base64", lineNo, id)
		}
		if kn != KeySize {
			return nil, fmt.Errorf("line %d: key %q is %d bytes, want %d", lineNo, id, kn, KeySize)
		}
		block, err := aes.NewCipher(key[:KeySize])
		clear(key) // the cipher keeps its own expanded copy
		if err != nil {
			return nil, fmt.Errorf("line %d: key %q: %w", lineNo, id, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("line %d: key %q: %w", lineNo, id, err)
		}
		firstLine[string(id)] = lineNo
		set.ids = append(set.ids, string(id))
		set.aeads[string(id)] = aead
	}
	if len(set.ids) == 0 {
		return nil, errors.New("no keys in file")
	}
	set.writer = set.ids[0]
	return set, nil
}

func validID(id []byte) bool {
	if len(id) == 0 || len(id) > MaxKeyIDLen {
		return false
	}
	for _, c := range id {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9',
			c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// NewKeyLine returns a fresh key file line "<id>:<base64 key>" (no newline)
// with a key from crypto/rand, for operators to put first in the file.
func NewKeyLine(id string) (string, error) {
	if !validID([]byte(id)) {
		return "", fmt.Errorf("key id must be 1..%d characters of [A-Za-z0-9._-]", MaxKeyIDLen)
	}
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return "", err
	}
	line := id + ":" + base64.StdEncoding.EncodeToString(key)
	clear(key)
	return line, nil
}
