package crypt

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func keyB64(t testing.TB) string {
	t.Helper()
	k := make([]byte, KeySize)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(k)
}

func writeFile(t testing.TB, dir, text string) string {
	t.Helper()
	p := filepath.Join(dir, "keys")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func mustParse(t testing.TB, text string) *Keyring {
	t.Helper()
	r, err := Parse([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func mid(b byte) (m [16]byte) {
	for i := range m {
		m[i] = b + byte(i)
	}
	return m
}

func TestRoundTrip(t *testing.T) {
	r := mustParse(t, "k1:"+keyB64(t)+"\n")
	for _, pt := range [][]byte{{}, {0xc0}, bytes.Repeat([]byte("x"), 4096)} {
		id, sealed, err := r.Seal(pt, "orders", mid(1))
		if err != nil {
			t.Fatal(err)
		}
		if id != "k1" || len(sealed) != len(pt)+Overhead || sealed[0] != 1 {
			t.Fatalf("id %q, len %d for %d bytes", id, len(sealed), len(pt))
		}
		if len(pt) > 8 && bytes.Contains(sealed, pt[:8]) {
			t.Fatal("plaintext visible in sealed bytes")
		}
		got, err := r.Open(id, sealed, "orders", mid(1))
		if err != nil || !bytes.Equal(got, pt) {
			t.Fatalf("open: %v, %d bytes", err, len(got))
		}
	}
}

func TestFreshNonces(t *testing.T) {
	r := mustParse(t, "k1:"+keyB64(t))
	seen := map[string]bool{}
	var first []byte
	for i := range 100000 {
		_, sealed, err := r.Seal([]byte("same payload"), "q", mid(0))
		if err != nil {
			t.Fatal(err)
		}
		nonce := string(sealed[1 : 1+nonceSize])
		if seen[nonce] {
			t.Fatalf("nonce repeated after %d seals", i)
		}
		seen[nonce] = true
		if i == 0 {
			first = sealed
		} else if bytes.Equal(sealed[1+nonceSize:], first[1+nonceSize:]) {
			t.Fatal("same ciphertext for the same plaintext")
		}
	}
}

func TestBinding(t *testing.T) {
	r := mustParse(t, "k1:"+keyB64(t))
	id, sealed, _ := r.Seal([]byte("payload"), "orders", mid(1))
	cases := []struct {
		queue string
		mid   [16]byte
	}{
		{"orders2", mid(1)},
		{"order", mid(1)},
		{"", mid(1)},
		{"orders", mid(2)},
		{"orders", [16]byte{}},
	}
	for _, c := range cases {
		if _, err := r.Open(id, sealed, c.queue, c.mid); !errors.Is(err, ErrTampered) {
			t.Errorf("queue %q mid %x: %v, want ErrTampered", c.queue, c.mid, err)
		}
	}
	// The length prefix keeps queue bytes from standing in for id bytes.
	var m [16]byte
	copy(m[:], "bcdefghijklmnopq")
	_, s2, _ := r.Seal(nil, "a", m)
	var m2 [16]byte
	copy(m2[:], "cdefghijklmnopq\x00")
	if _, err := r.Open(id, s2, "ab", m2); !errors.Is(err, ErrTampered) {
		t.Errorf("shifted queue/id boundary opened: %v", err)
	}
}

func TestEveryBitFlipAndTruncation(t *testing.T) {
	r := mustParse(t, "k1:"+keyB64(t))
	id, sealed, _ := r.Seal([]byte("a payload of some length"), "q", mid(7))
	for i := range len(sealed) * 8 {
		b := bytes.Clone(sealed)
		b[i/8] ^= 1 << (i % 8)
		if _, err := r.Open(id, b, "q", mid(7)); !errors.Is(err, ErrTampered) {
			t.Fatalf("bit %d flipped: %v", i, err)
		}
	}
	for n := range len(sealed) {
		if _, err := r.Open(id, sealed[:n], "q", mid(7)); !errors.Is(err, ErrTampered) {
			t.Fatalf("truncated to %d: %v", n, err)
		}
	}
	if _, err := r.Open(id, append(bytes.Clone(sealed), 0), "q", mid(7)); !errors.Is(err, ErrTampered) {
		t.Fatalf("extended: %v", err)
	}
}

func TestKeyMissing(t *testing.T) {
	a := mustParse(t, "a:"+keyB64(t))
	b := mustParse(t, "b:"+keyB64(t))
	id, sealed, _ := a.Seal([]byte("p"), "q", mid(1))
	if _, err := b.Open(id, sealed, "q", mid(1)); !errors.Is(err, ErrKeyMissing) {
		t.Fatalf("open with another ring: %v", err)
	}
	// Same id, different key material: authentication fails, nothing leaks.
	a2 := mustParse(t, "a:"+keyB64(t))
	if _, err := a2.Open(id, sealed, "q", mid(1)); !errors.Is(err, ErrTampered) {
		t.Fatalf("open with a different key of the same id: %v", err)
	}
	// A sidecar without a key file: nil and zero rings.
	for _, r := range []*Keyring{nil, {}} {
		if _, _, err := r.Seal([]byte("p"), "q", mid(1)); !errors.Is(err, ErrKeyMissing) {
			t.Fatalf("seal without keys: %v", err)
		}
		if _, err := r.Open(id, sealed, "q", mid(1)); !errors.Is(err, ErrKeyMissing) {
			t.Fatalf("open without keys: %v", err)
		}
		if r.Has(id) || r.WriterID() != "" || r.IDs() != nil {
			t.Fatal("empty ring reports keys")
		}
	}
}

func TestRotation(t *testing.T) {
	dir := t.TempDir()
	oldLine := "old:" + keyB64(t)
	path := writeFile(t, dir, oldLine+"\n")
	r, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	oldID, oldSealed, _ := r.Seal([]byte("before"), "q", mid(1))

	newLine := "new:" + keyB64(t)
	writeFile(t, dir, "# rotated\n"+newLine+"\n"+oldLine+"\n")
	if err := r.Reload(path); err != nil {
		t.Fatal(err)
	}
	if r.WriterID() != "new" || strings.Join(r.IDs(), ",") != "new,old" {
		t.Fatalf("writer %q ids %v", r.WriterID(), r.IDs())
	}
	newID, newSealed, _ := r.Seal([]byte("after"), "q", mid(2))
	if oldID != "old" || newID != "new" {
		t.Fatalf("sealed under %q then %q", oldID, newID)
	}
	if pt, err := r.Open(oldID, oldSealed, "q", mid(1)); err != nil || string(pt) != "before" {
		t.Fatalf("old message after rotation: %q %v", pt, err)
	}
	if pt, err := r.Open(newID, newSealed, "q", mid(2)); err != nil || string(pt) != "after" {
		t.Fatalf("new message: %q %v", pt, err)
	}

	// Dropping the old key from the file makes its messages key_missing.
	writeFile(t, dir, newLine+"\n")
	r2, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r2.Open(oldID, oldSealed, "q", mid(1)); !errors.Is(err, ErrKeyMissing) {
		t.Fatalf("old key dropped: %v", err)
	}
	if _, err := r2.Open(newID, newSealed, "q", mid(2)); err != nil {
		t.Fatalf("new key after restart: %v", err)
	}
}

func TestReloadFailureKeepsKeys(t *testing.T) {
	dir := t.TempDir()
	good := keyB64(t)
	path := writeFile(t, dir, "k1:"+good+"\n")
	r, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	id, sealed, _ := r.Seal([]byte("p"), "q", mid(1))

	short := base64.StdEncoding.EncodeToString(make([]byte, 31))
	broken := []string{
		"k2:" + short + "\nk1:" + good + "\n", // wrong length
		"k2:" + good + "\nk2:" + good + "\n",  // duplicate
		"k2:" + good[:40] + "!!!=\n",          // bad base64
		"# nothing\n\n",                       // no keys
		good + "\n",                           // no id
	}
	for _, text := range broken {
		writeFile(t, dir, text)
		err := r.Reload(path)
		if err == nil {
			t.Fatalf("reload of %q succeeded", text)
		}
		if strings.Contains(err.Error(), good) || strings.Contains(err.Error(), good[:16]) ||
			strings.Contains(err.Error(), short[:16]) {
			t.Fatalf("error shows key material: %v", err)
		}
		if r.WriterID() != "k1" {
			t.Fatalf("writer changed to %q", r.WriterID())
		}
		if _, err := r.Open(id, sealed, "q", mid(1)); err != nil {
			t.Fatalf("old keys lost: %v", err)
		}
	}
	if err := r.Reload(filepath.Join(dir, "absent")); err == nil || r.WriterID() != "k1" {
		t.Fatalf("reload of a missing file: %v, writer %q", err, r.WriterID())
	}
}

func TestParseErrors(t *testing.T) {
	k := keyB64(t)
	cases := []struct{ text, want string }{
		{"", "no keys"},
		{"# only comments\n   \n", "no keys"},
		{"k1:" + k + "\n\nk2\n", "line 3: want <id>:<base64 key>"},
		{"# c\nk1:" + k + "\nk1:" + k, `line 3: key id "k1" already used on line 2`},
		{"k1:" + base64.StdEncoding.EncodeToString(make([]byte, 16)), `line 1: key "k1" is 16 bytes, want 32`},
		{"\n\nk1:" + base64.StdEncoding.EncodeToString(make([]byte, 33)), `line 3: key "k1" is 33 bytes, want 32`},
		{"k1:" + k[:43] + "*", `line 1: key "k1" is not valid base64`},
		{"k1:", `line 1: key "k1" is 0 bytes`},
		{":" + k, "line 1: key id must be"},
		{"bad id:" + k, "line 1: key id must be"},
		{"a/b:" + k, "line 1: key id must be"},
		{strings.Repeat("x", 65) + ":" + k, "line 1: key id must be"},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.text))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %q", c.text, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), k[:16]) {
			t.Errorf("error shows key material: %v", err)
		}
	}
}

func TestParseAccepts(t *testing.T) {
	k1, k2 := keyB64(t), keyB64(t)
	text := "# keys\r\n  \t\n  first-1.A_b : " + k1 + "  \r\n# old\n" +
		strings.Repeat("z", 64) + ":" + k2
	r := mustParse(t, text)
	if got := strings.Join(r.IDs(), ","); got != "first-1.A_b,"+strings.Repeat("z", 64) {
		t.Fatalf("ids %s", got)
	}
	if r.WriterID() != "first-1.A_b" || !r.Has(strings.Repeat("z", 64)) || r.Has("nope") {
		t.Fatal("wrong writer or Has")
	}
}

func TestNewKeyLine(t *testing.T) {
	line, err := NewKeyLine("2025-06.a")
	if err != nil {
		t.Fatal(err)
	}
	other, _ := NewKeyLine("b")
	r := mustParse(t, line+"\n"+other+"\n")
	if r.WriterID() != "2025-06.a" || strings.Contains(line, "\n") {
		t.Fatalf("line %q", line)
	}
	if line[len("2025-06.a:"):] == other[len("b:"):] {
		t.Fatal("two generated keys are equal")
	}
	for _, bad := range []string{"", "a b", strings.Repeat("x", 65), "é"} {
		if _, err := NewKeyLine(bad); err == nil {
			t.Errorf("NewKeyLine(%q) accepted", bad)
		}
	}
}

func TestPackRecord(t *testing.T) {
	r := mustParse(t, "key-7:"+keyB64(t))
	blob, err := r.SealRecord([]byte("spooled"), "q", mid(3))
	if err != nil {
		t.Fatal(err)
	}
	if !IsPacked(blob) || IsPacked([]byte{0x81, 0xa1, 'k'}) || IsPacked(nil) {
		t.Fatal("IsPacked")
	}
	id, sealed, err := UnpackRecord(blob)
	if err != nil || id != "key-7" {
		t.Fatalf("unpack: %q %v", id, err)
	}
	if !bytes.Equal(PackRecord(id, sealed), blob) {
		t.Fatal("pack(unpack(b)) != b")
	}
	if pt, err := r.OpenRecord(blob, "q", mid(3)); err != nil || string(pt) != "spooled" {
		t.Fatalf("open record: %q %v", pt, err)
	}
	if _, err := r.OpenRecord(blob, "q", mid(4)); !errors.Is(err, ErrTampered) {
		t.Fatalf("record of another message: %v", err)
	}
	for n := range 3 + len(id) {
		if _, _, err := UnpackRecord(blob[:n]); !errors.Is(err, ErrTampered) {
			t.Fatalf("truncated to %d: %v", n, err)
		}
	}
	for n := 3 + len(id); n < len(blob); n++ {
		if _, err := r.OpenRecord(blob[:n], "q", mid(3)); !errors.Is(err, ErrTampered) {
			t.Fatalf("truncated to %d: %v", n, err)
		}
	}
	other := mustParse(t, "other:"+keyB64(t))
	if _, err := other.OpenRecord(blob, "q", mid(3)); !errors.Is(err, ErrKeyMissing) {
		t.Fatalf("record without its key: %v", err)
	}
}

func TestConcurrentSealOpenReload(t *testing.T) {
	dir := t.TempDir()
	lines := []string{"k0:" + keyB64(t)}
	path := writeFile(t, dir, lines[0])
	r, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, 8)
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				q, m := fmt.Sprintf("q%d", w), mid(byte(i))
				id, sealed, err := r.Seal([]byte("payload"), q, m)
				if err == nil {
					var pt []byte
					pt, err = r.Open(id, sealed, q, m)
					if err == nil && string(pt) != "payload" {
						err = errors.New("wrong plaintext")
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	// Rotate while they run; every file keeps all earlier keys, plus a
	// broken reload now and then that must change nothing.
	for i := 1; i <= 50; i++ {
		lines = append([]string{fmt.Sprintf("k%d:%s", i, keyB64(t))}, lines...)
		text := strings.Join(lines, "\n")
		if i%5 == 0 {
			writeFile(t, dir, text+"\nbroken")
			if r.Reload(path) == nil {
				t.Error("broken reload accepted")
			}
		}
		writeFile(t, dir, text)
		if err := r.Reload(path); err != nil {
			t.Error(err)
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if r.WriterID() != "k50" {
		t.Fatalf("writer %q", r.WriterID())
	}
}
