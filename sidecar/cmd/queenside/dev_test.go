package main

import (
	"path/filepath"
	"strings"
	"testing"

	queenside "github.com/queenside/queenside/clients/go"
)

// The banner's hint names the way the CLI will find the socket: on its own
// only when the socket is where the CLI looks from here.
func TestDevSocketHint(t *testing.T) {
	here, err := filepath.Abs(queenside.DevSocket)
	if err != nil {
		t.Fatal(err)
	}
	if hint := socketHint(here); !strings.Contains(hint, "the CLI finds ./"+queenside.DevSocket) {
		t.Fatalf("the default socket's hint: %s", hint)
	}
	elsewhere := "/srv/dev/queenside.sock"
	if hint := socketHint(elsewhere); strings.Contains(hint, "finds") || !strings.Contains(hint, "export QUEENSIDE_SOCKET="+elsewhere) {
		t.Fatalf("a --dir elsewhere's hint: %s", hint)
	}
}
