package sidecar

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"time"
)

// The dashboard's API takes two kinds of bearer token: admin tokens may
// read and write, read tokens may only read. Reads are open until a read
// token is configured, as /metrics is: the side port is the pod's, and
// probes and scrapers there carry no secret. Writes always need an admin
// token. Each token has a name, so that the log says who wrote what.

// Token is one bearer token of the API and the name it is logged under.
type Token struct {
	Name   string
	Secret string
}

// Tokens are the API's bearer tokens.
type Tokens struct {
	Admin []Token // may read and write; none: every write is refused
	Read  []Token // may read; any: reads need a token (read or admin)
}

// AdminTokens is Tokens with one admin token named "admin".
func AdminTokens(secret string) Tokens {
	return Tokens{Admin: []Token{{Name: "admin", Secret: secret}}}
}

// role is what a request's token allows.
type role int

const (
	roleNone role = iota
	roleRead
	roleAdmin
)

func (r role) String() string {
	switch r {
	case roleRead:
		return "read"
	case roleAdmin:
		return "admin"
	}
	return "none"
}

// minTokenLength keeps tokens out of reach of guessing.
const minTokenLength = 16

var tokenName = regexp.MustCompile(`^[A-Za-z0-9._@-]{1,64}$`)

// readTokens reads the admin and read token files ("" for none) and checks
// that no token is in both.
func readTokens(adminFile, readFile string) (Tokens, error) {
	var t Tokens
	var err error
	if t.Admin, err = readTokenFile("--admin-token-file", adminFile, "admin"); err != nil {
		return Tokens{}, err
	}
	if t.Read, err = readTokenFile("--read-token-file", readFile, "read"); err != nil {
		return Tokens{}, err
	}
	for _, r := range t.Read {
		for _, a := range t.Admin {
			if r.Secret == a.Secret {
				return Tokens{}, fmt.Errorf("--read-token-file: token %q is also an admin token (%q); a token has one role", r.Name, a.Name)
			}
		}
	}
	return t, nil
}

// readTokenFile reads one token file: a token a line, as `<name>:<token>`
// or, for a file of one token, the bare token, named bareName. Blank lines
// and lines starting with # are skipped.
func readTokenFile(flag, path, bareName string) ([]Token, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	var tokens []Token
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		t := Token{Name: bareName, Secret: line}
		if name, secret, ok := strings.Cut(line, ":"); ok {
			t = Token{Name: strings.TrimSpace(name), Secret: strings.TrimSpace(secret)}
			if !tokenName.MatchString(t.Name) {
				return nil, fmt.Errorf("%s %s line %d: the name %q: want 1 to 64 of A-Z a-z 0-9 . _ @ -", flag, path, n, t.Name)
			}
		}
		if len(t.Secret) < minTokenLength {
			return nil, fmt.Errorf("%s %s line %d: the token is %d characters long; use at least %d (say, openssl rand -hex 32)", flag, path, n, len(t.Secret), minTokenLength)
		}
		if seen[t.Name] {
			return nil, fmt.Errorf("%s %s line %d: a second token named %q; give each its own name as <name>:<token>", flag, path, n, t.Name)
		}
		seen[t.Name] = true
		tokens = append(tokens, t)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s %s: %w", flag, path, err)
	}
	if len(tokens) == 0 {
		return nil, fmt.Errorf("%s %s: no token in the file", flag, path)
	}
	return tokens, nil
}

// match finds the token a request carries. Every token is compared, each
// through its hash in constant time, so that neither the time taken nor
// its length tells how close a guess came.
func (t Tokens) match(r *http.Request) (string, role) {
	given, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return "", roleNone
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(given)))
	name, found := "", roleNone
	check := func(list []Token, as role) {
		for _, tok := range list {
			want := sha256.Sum256([]byte(tok.Secret))
			if subtle.ConstantTimeCompare(want[:], got[:]) == 1 {
				name, found = tok.Name, as
			}
		}
	}
	check(t.Read, roleRead)
	check(t.Admin, roleAdmin)
	return name, found
}

// readsNeedToken reports whether reads are closed to requests without a token.
func (t Tokens) readsNeedToken() bool { return len(t.Read) > 0 }

// gateReads lets a request under /api/ through when reads are open or it
// carries a token; /api/info and /api/auth stay open, for the page to
// learn that it must ask for a token and to check one.
func (s *Server) gateReads(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		open := r.URL.Path == "/api/info" || r.URL.Path == "/api/auth"
		if !open && s.opts.Tokens.readsNeedToken() {
			if _, role := s.opts.Tokens.match(r); role == roleNone {
				writeAPIError(w, http.StatusUnauthorized, "unauthorized",
					"reads need a token on this sidecar (--read-token-file): Authorization: Bearer <token>")
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// adminOnly lets a write through only with an admin token, and logs it:
// who (the token's name), what (method, path and body) and how it ended.
func (s *Server) adminOnly(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name, ok := s.authorize(w, r)
		if !ok {
			s.log.Warn("dashboard write refused", "token", name, "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxAPIBody))
		if err != nil {
			writeAPIError(w, http.StatusBadRequest, "invalid_argument", fmt.Sprintf("body: %v", err))
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		start := time.Now()
		next(rec, r)
		s.log.Info("dashboard write", "token", name, "method", r.Method, "path", r.URL.Path,
			"body", logExcerpt(body), "status", rec.status, "took", time.Since(start).Round(time.Millisecond), "remote", r.RemoteAddr)
	}
}

// authorize reports the admin token r carries, and answers 403 when it
// carries none (naming a read token it does carry, for the log).
func (s *Server) authorize(w http.ResponseWriter, r *http.Request) (string, bool) {
	if len(s.opts.Tokens.Admin) == 0 {
		writeAPIError(w, http.StatusForbidden, "writes_disabled",
			"writes are disabled: start the sidecar with --admin-token-file to allow them")
		return "", false
	}
	name, role := s.opts.Tokens.match(r)
	switch role {
	case roleAdmin:
		return name, true
	case roleRead:
		writeAPIError(w, http.StatusForbidden, "forbidden", fmt.Sprintf("the token %q may only read; a write needs an admin token", name))
	default:
		writeAPIError(w, http.StatusForbidden, "forbidden", "a write needs an admin token: Authorization: Bearer <token>")
	}
	return name, false
}

// maxLoggedBody bounds how much of a write's body goes into its log line.
const maxLoggedBody = 512

func logExcerpt(body []byte) string {
	s := string(bytes.TrimSpace(body))
	if len(s) > maxLoggedBody {
		return fmt.Sprintf("%s… (%d bytes)", s[:maxLoggedBody], len(body))
	}
	return s
}

// statusRecorder keeps the status a handler answered with.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(status int) {
	r.status = status
	r.ResponseWriter.WriteHeader(status)
}

// Unwrap lets http.ResponseController reach the writer underneath, so
// that a handler streaming its progress can flush.
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
