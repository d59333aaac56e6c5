package sidecar

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/queenside/queenside/protocol"
)

// The dashboard's API takes two kinds of bearer token: admin tokens may
// read and write, read tokens may only read. Reads are open until a read
// token is configured, as /metrics is: the side port is the pod's, and
// probes and scrapers there carry no secret. Writes always need an admin
// token. Each token has a name, so that the log says who wrote what.
//
// A token may be scoped, as PostgreSQL roles are by queenside.grant: to
// queue patterns and to rights among read and manage (produce and consume
// have no dashboard route). A token line then reads
//
//	billing-ro:SECRET queues=billing.* rights=read
//	billing-ops:SECRET queues=billing.*,payments rights=read,manage
//
// Without queues= a token covers every queue ("*"); without rights= it has
// its file's: read in the read file, read and manage in the admin file.
// The database still decides what the sidecar's own role may do: a token
// never exceeds it.

// Token is one bearer token of the API and the name it is logged under.
type Token struct {
	Name   string
	Secret string
	// Scope narrows what the token may do; nil gives it its file's
	// meaning: read (read file), or read and manage (admin file), on
	// every queue.
	Scope *Scope
}

// Scope is what a token may do: rights on the queues its patterns match.
type Scope struct {
	Queues []string // patterns: a queue's name, or a prefix ending in '*'
	Rights []string // rightRead, rightManage, in that order
}

// The rights a token may carry, named as queenside.grant names them.
const (
	rightRead   = "read"   // stats, groups, dead letters' list, messages and payloads
	rightManage = "manage" // pause, seek, replay and delete dead letters; maintenance on "*"
)

// everyQueue is the pattern that matches every queue; manage on it is
// needed for what is not one queue's (maintenance).
const everyQueue = "*"

func (sc Scope) String() string {
	return "queues=" + strings.Join(sc.Queues, ",") + " rights=" + strings.Join(sc.Rights, ",")
}

// may reports whether the scope gives right on queue.
func (sc Scope) may(right, queue string) bool {
	if !slices.Contains(sc.Rights, right) {
		return false
	}
	for _, p := range sc.Queues {
		if queuePatternMatches(p, queue) {
			return true
		}
	}
	return false
}

// mayEvery reports whether the scope gives right on every queue.
func (sc Scope) mayEvery(right string) bool { return sc.may(right, everyQueue) }

// queuePatternMatches is the one rule of queue patterns, as the database's
// queenside.matches has it (schema/migrations/0021_grants.sql): the same
// name, or, for a pattern ending in '*', a name that starts with what
// precedes it ("*" matches every name).
func queuePatternMatches(pattern, name string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(name, prefix)
	}
	return name == pattern
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

// fileScope is what a token of a file may do when its line has no scope.
func (r role) fileScope() Scope {
	switch r {
	case roleRead:
		return Scope{Queues: []string{everyQueue}, Rights: []string{rightRead}}
	case roleAdmin:
		return Scope{Queues: []string{everyQueue}, Rights: []string{rightRead, rightManage}}
	}
	return Scope{}
}

// minTokenLength keeps tokens out of reach of guessing.
const minTokenLength = 16

var tokenName = regexp.MustCompile(`^[A-Za-z0-9._@-]{1,64}$`)

// readTokens reads the admin and read token files ("" for none) and checks
// that no token is in both.
func readTokens(adminFile, readFile string) (Tokens, error) {
	var t Tokens
	var err error
	if t.Admin, err = readTokenFile("--admin-token-file", adminFile, roleAdmin); err != nil {
		return Tokens{}, err
	}
	if t.Read, err = readTokenFile("--read-token-file", readFile, roleRead); err != nil {
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
// or, for a file of one token, the bare token, named after the file's
// role; either may be followed by a scope (parseScope). Blank lines and
// lines starting with # are skipped.
func readTokenFile(flag, path string, of role) ([]Token, error) {
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
		// The name ends at the first colon, unless a scope's = comes first
		// (a bare token followed by queues=a:b).
		t := Token{Name: of.String()}
		rest := line
		if name, after, ok := strings.Cut(line, ":"); ok && !strings.Contains(name, "=") {
			t.Name, rest = strings.TrimSpace(name), after
			if !tokenName.MatchString(t.Name) {
				return nil, fmt.Errorf("%s %s line %d: the name %q: want 1 to 64 of A-Z a-z 0-9 . _ @ -", flag, path, n, t.Name)
			}
		}
		words := strings.Fields(rest)
		if len(words) > 0 {
			t.Secret = words[0]
		}
		if len(t.Secret) < minTokenLength {
			return nil, fmt.Errorf("%s %s line %d: the token is %d characters long; use at least %d (say, openssl rand -hex 32)", flag, path, n, len(t.Secret), minTokenLength)
		}
		if len(words) > 1 {
			scope, err := parseScope(words[1:], of)
			if err != nil {
				return nil, fmt.Errorf("%s %s line %d: %w", flag, path, n, err)
			}
			t.Scope = &scope
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

// scopeSyntax is how a scope is written, for the errors that show it.
const scopeSyntax = "queues=<pattern>[,<pattern>...] rights=<read|manage>[,...]"

// parseScope reads the words after a token: queues= and rights=, each at
// most once, either left out for its default (every queue; the file's
// rights).
func parseScope(words []string, of role) (Scope, error) {
	sc := of.fileScope()
	given := map[string]bool{}
	for _, w := range words {
		key, value, ok := strings.Cut(w, "=")
		if !ok || key != "queues" && key != "rights" {
			return Scope{}, fmt.Errorf("after the token, %q: want a scope, %s (a token has no spaces)", w, scopeSyntax)
		}
		if given[key] {
			return Scope{}, fmt.Errorf("%s= is given twice; list its values once, separated by commas", key)
		}
		given[key] = true
		if value == "" {
			return Scope{}, fmt.Errorf("%s= is empty; want %s", key, scopeSyntax)
		}
		list := strings.Split(value, ",")
		switch key {
		case "queues":
			sc.Queues = nil
			for _, p := range list {
				if err := checkQueuePattern(p); err != nil {
					return Scope{}, err
				}
				if !slices.Contains(sc.Queues, p) {
					sc.Queues = append(sc.Queues, p)
				}
			}
		case "rights":
			var rights []string
			for _, r := range list {
				switch r {
				case rightRead, rightManage:
				case "produce", "consume":
					return Scope{}, fmt.Errorf("rights=%s: the dashboard has no route that %ss; a token may read and manage (grant %s to the application's PostgreSQL role with queenside grant)", r, r, r)
				default:
					return Scope{}, fmt.Errorf("rights=%s: %q is not a right; want read or manage", value, r)
				}
				if r == rightManage && of == roleRead {
					return Scope{}, fmt.Errorf("rights=%s: a read token may only read; a token that manages goes in --admin-token-file", value)
				}
				rights = append(rights, r)
			}
			// In one order, read before manage, as the refusals show them.
			sc.Rights = nil
			for _, r := range []string{rightRead, rightManage} {
				if slices.Contains(rights, r) {
					sc.Rights = append(sc.Rights, r)
				}
			}
		}
	}
	return sc, nil
}

// checkQueuePattern checks a pattern as queenside.grant does, and its
// characters as a queue name's: a name, or a prefix ending in '*'.
func checkQueuePattern(p string) error {
	prefix, wild := strings.CutSuffix(p, "*")
	if p == "" || strings.Contains(prefix, "*") {
		return fmt.Errorf("queues=: %q: want a queue name, or a prefix ending in * (billing.*; * for every queue)", p)
	}
	if prefix == "" && wild {
		return nil
	}
	if err := protocol.CheckName("queue", prefix); err != nil {
		return fmt.Errorf("queues=: %q: %v", p, err)
	}
	return nil
}

// access is what a request may do: the token it carries (name "" and
// roleNone for none) and that token's scope. A request without a token
// may read every queue while reads are open (no read token configured).
type access struct {
	name  string
	role  role
	scope Scope
}

// access finds the token a request carries. Every token is compared, each
// through its hash in constant time, so that neither the time taken nor
// its length tells how close a guess came.
func (t Tokens) access(r *http.Request) access {
	given, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return t.noToken()
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(given)))
	var found *Token
	as := roleNone
	check := func(list []Token, r role) {
		for i := range list {
			want := sha256.Sum256([]byte(list[i].Secret))
			if subtle.ConstantTimeCompare(want[:], got[:]) == 1 {
				found, as = &list[i], r
			}
		}
	}
	check(t.Read, roleRead)
	check(t.Admin, roleAdmin)
	if found == nil {
		return t.noToken()
	}
	a := access{name: found.Name, role: as, scope: as.fileScope()}
	if found.Scope != nil {
		a.scope = *found.Scope
	}
	return a
}

func (t Tokens) noToken() access {
	if t.readsNeedToken() {
		return access{}
	}
	return access{scope: roleRead.fileScope()}
}

// match finds the token a request carries: its name and role.
func (t Tokens) match(r *http.Request) (string, role) {
	a := t.access(r)
	return a.name, a.role
}

// scoped tells whether the token's scope is narrower than its file's.
func (a access) scoped() bool {
	full := a.role.fileScope()
	return !slices.Equal(a.scope.Queues, full.Queues) || !slices.Equal(a.scope.Rights, full.Rights)
}

// need refuses what the scope does not give: right on queue, with a 403
// "forbidden" that names the token, the right, the queue and the scope.
func (a access) need(right, queue string) error {
	if a.scope.may(right, queue) {
		return nil
	}
	what := queue
	if queue == everyQueue {
		what = "every queue (" + everyQueue + ")"
	}
	if a.role == roleNone {
		return protocol.Errorf(protocol.CodeForbidden, "a request without a token may not %s %s: Authorization: Bearer <token>", right, what)
	}
	return protocol.Errorf(protocol.CodeForbidden, "the token %q may not %s %s: its scope is %s", a.name, right, what, a.scope)
}

// readsNeedToken reports whether reads are closed to requests without a token.
func (t Tokens) readsNeedToken() bool { return len(t.Read) > 0 }

// gateReads lets a request under /api/ through when reads are open or it
// carries a token; /api/info and /api/auth stay open, for the page to
// learn that it must ask for a token and to check one. Which queues a
// token may read is checked by each route (readsQueue, and the listings
// filtered to the token's queues).
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

// readsQueue answers fn only when the request may read the path's queue.
func (s *Server) readsQueue(fn func(context.Context, *http.Request) (any, error)) func(context.Context, *http.Request) (any, error) {
	return func(ctx context.Context, r *http.Request) (any, error) {
		if err := s.opts.Tokens.access(r).need(rightRead, r.PathValue("queue")); err != nil {
			return nil, err
		}
		return fn(ctx, r)
	}
}

// writeCheck decides whether a write's token may do it, from its path and
// body (r.Body can be read again); nil lets it through.
type writeCheck func(ctx context.Context, r *http.Request, a access) error

// managesPathQueue: manage on the path's queue.
func managesPathQueue(_ context.Context, r *http.Request, a access) error {
	return a.need(rightManage, r.PathValue("queue"))
}

// managesEveryQueue: manage on "*", for what is no one queue's.
func managesEveryQueue(_ context.Context, _ *http.Request, a access) error {
	return a.need(rightManage, everyQueue)
}

// adminOnly lets a write through only with an admin token that check
// accepts, and logs it: who (the token's name), what (method, path and
// body) and how it ended.
func (s *Server) adminOnly(check writeCheck, next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		a, ok := s.authorize(w, r)
		if !ok {
			s.log.Warn("dashboard write refused", "token", a.name, "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxAPIBody))
		if err != nil {
			writeAPIError(w, http.StatusBadRequest, "invalid_argument", fmt.Sprintf("body: %v", err))
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		if check != nil {
			if !s.ready.Load() {
				writeAPIError(w, http.StatusServiceUnavailable, protocol.CodeUnavailable, "the database schema is not ready yet")
				return
			}
			ctx, cancel := s.store.Bound(r.Context())
			err := check(ctx, r, a)
			cancel()
			r.Body = io.NopCloser(bytes.NewReader(body))
			if err != nil {
				pe := s.toProtocolError(err)
				if pe.Code == protocol.CodeForbidden {
					s.log.Warn("dashboard write refused", "token", a.name, "method", r.Method, "path", r.URL.Path,
						"body", logExcerpt(body), "reason", pe.Message, "remote", r.RemoteAddr)
				}
				writeAPIError(w, apiStatus(pe.Code), pe.Code, pe.Message)
				return
			}
		}
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		start := time.Now()
		next(rec, r)
		s.log.Info("dashboard write", "token", a.name, "method", r.Method, "path", r.URL.Path,
			"body", logExcerpt(body), "status", rec.status, "took", time.Since(start).Round(time.Millisecond), "remote", r.RemoteAddr)
	}
}

// authorize reports the admin token r carries, and answers 403 when it
// carries none (naming a read token it does carry, for the log). What the
// token's scope allows is the route's writeCheck's to decide.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request) (access, bool) {
	if len(s.opts.Tokens.Admin) == 0 {
		writeAPIError(w, http.StatusForbidden, "writes_disabled",
			"writes are disabled: start the sidecar with --admin-token-file to allow them")
		return access{}, false
	}
	a := s.opts.Tokens.access(r)
	switch a.role {
	case roleAdmin:
		return a, true
	case roleRead:
		writeAPIError(w, http.StatusForbidden, "forbidden", fmt.Sprintf("the token %q may only read; a write needs an admin token", a.name))
	default:
		writeAPIError(w, http.StatusForbidden, "forbidden", "a write needs an admin token: Authorization: Bearer <token>")
	}
	return a, false
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
