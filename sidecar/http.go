package sidecar

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/pprof"
	"net/url"
	"os"
	"regexp"
	"strings"

	"github.com/queenside/queenside/protocol"
)

// HTTPHandler serves the probes of the optional side port:
//
//	/live   200 while the process serves its socket, whatever PostgreSQL
//	        does. Use it for liveness: restarting a sidecar because the
//	        database is down would gain nothing.
//	/health a real database round trip; 200 or 503 with the health JSON.
//	        Use it for readiness.
//	/metrics Prometheus text: requests, push statuses, the spool and its
//	        replay, database reachability, connections, leases.
//	/       the operator dashboard, and under /api/ the JSON it reads
//	        (sidecar/dashboard/API.md); writes need the admin token.
//
// Serving the dashboard starts sampling its history (api_history.go).
func (s *Server) HTTPHandler() http.Handler {
	s.startHistory()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /live", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("ok\n")) //nolint:errcheck // the probe reads the status
	})
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		h := s.Health(r.Context())
		w.Header().Set("Content-Type", "application/json")
		if h.Status != protocol.HealthOK {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		json.NewEncoder(w).Encode(h) //nolint:errcheck // the probe reads the status
	})
	mux.Handle("GET /metrics", s.metrics.handler())
	s.routeDashboard(mux)
	return mux
}

// withProfiling adds Go's profiling endpoints under /debug/pprof/, for
// admin tokens only, and of those only the ones that may read and manage
// every queue: a profile shows the process's memory, and its command
// line the database URL. That command line is shown with the URL's
// password redacted all the same.
func (s *Server) withProfiling(next http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", s.profilingOnly(pprof.Index))
	mux.HandleFunc("/debug/pprof/cmdline", s.profilingOnly(redactedCmdline))
	mux.HandleFunc("/debug/pprof/profile", s.profilingOnly(pprof.Profile))
	mux.HandleFunc("/debug/pprof/symbol", s.profilingOnly(pprof.Symbol))
	mux.HandleFunc("/debug/pprof/trace", s.profilingOnly(pprof.Trace))
	mux.Handle("/", next)
	return mux
}

// profilingOnly lets a request through only with an admin token whose
// scope is every right on every queue.
func (s *Server) profilingOnly(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if len(s.opts.Tokens.Admin) == 0 {
			writeAPIError(w, http.StatusForbidden, "forbidden",
				"profiling needs an admin token: start the sidecar with --admin-token-file")
			return
		}
		a := s.opts.Tokens.access(r)
		if a.role != roleAdmin {
			writeAPIError(w, http.StatusForbidden, "forbidden", "profiling needs an admin token: Authorization: Bearer <token>")
			return
		}
		if !a.scope.mayEvery(rightRead) || !a.scope.mayEvery(rightManage) {
			writeAPIError(w, http.StatusForbidden, "forbidden", fmt.Sprintf(
				"the token %q may not profile the sidecar: its scope is %s; profiling needs queues=* rights=read,manage", a.name, a.scope))
			return
		}
		next(w, r)
	}
}

// redactedCmdline answers as pprof's cmdline does, the arguments separated
// by NUL bytes, with the password of any URL among them replaced by xxxxx.
func redactedCmdline(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprint(w, strings.Join(RedactedArgs(os.Args), "\x00"))
}

// passwordSetting is a password in a connection string of key=value
// settings (password=secret, or password='a secret').
var passwordSetting = regexp.MustCompile(`(?i)(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)

// RedactedArgs returns args with the password of every database URL among
// them (--database-url's value, whether given as its own argument or after
// =, as a URL or as key=value settings) replaced by xxxxx.
func RedactedArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		name, value, hasEq := strings.Cut(a, "=")
		if !hasEq || !strings.HasPrefix(name, "-") {
			name, value = "", a
		}
		if u, err := url.Parse(value); err == nil && u.User != nil {
			if _, has := u.User.Password(); has {
				value = u.Redacted()
			}
		}
		value = passwordSetting.ReplaceAllString(value, "${1}xxxxx") // key=value settings, or a URL's query
		if name != "" {
			value = name + "=" + value
		}
		out[i] = value
	}
	return out
}
