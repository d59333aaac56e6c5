package sidecar

import (
	"encoding/json"
	"net/http"
	"net/http/pprof"

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

// withProfiling adds Go's profiling endpoints under /debug/pprof/.
func withProfiling(next http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.Handle("/", next)
	return mux
}
