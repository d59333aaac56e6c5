package sidecar

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"os"
	"strings"
)

// readAdminToken reads the dashboard's admin token from path ("" for none).
func readAdminToken(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--admin-token-file: %w", err)
	}
	token := strings.TrimSpace(string(b))
	if len(token) < 16 {
		return "", fmt.Errorf("--admin-token-file %s: the token is %d characters long; use at least 16 (say, openssl rand -hex 32)", path, len(token))
	}
	return token, nil
}

// adminOnly lets a write through only with the admin token.
func (s *Server) adminOnly(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.authorize(w, r) {
			next(w, r)
		}
	}
}

// authorize reports whether r carries the admin token, and answers 403
// when it does not. Both sides are hashed first, so that the constant-time
// comparison does not even leak the token's length.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request) bool {
	if s.opts.AdminToken == "" {
		writeAPIError(w, http.StatusForbidden, "writes_disabled",
			"writes are disabled: start the sidecar with --admin-token-file to allow them")
		return false
	}
	given, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	want := sha256.Sum256([]byte(s.opts.AdminToken))
	got := sha256.Sum256([]byte(strings.TrimSpace(given)))
	if !ok || subtle.ConstantTimeCompare(want[:], got[:]) != 1 {
		writeAPIError(w, http.StatusForbidden, "forbidden", "a write needs the admin token: Authorization: Bearer <token>")
		return false
	}
	return true
}
