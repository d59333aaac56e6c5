package sidecar

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/queenside/queenside/protocol"
)

func TestHTTPProbes(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	srv := httptest.NewServer(ts.srv.HTTPHandler())
	defer srv.Close()
	get := func(path string) (int, protocol.HealthResult) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var h protocol.HealthResult
		if path == "/health" {
			if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
				t.Fatal(err)
			}
		}
		return resp.StatusCode, h
	}
	if code, _ := get("/live"); code != http.StatusOK {
		t.Fatalf("/live: %d", code)
	}
	if code, h := get("/health"); code != http.StatusOK || h.Status != protocol.HealthOK || !h.Database.OK {
		t.Fatalf("/health: %d %+v", code, h)
	}
	// Draining is not ready: /health says 503, /live stays 200.
	ts.srv.mu.Lock()
	ts.srv.startDraining()
	ts.srv.mu.Unlock()
	if code, h := get("/health"); code != http.StatusServiceUnavailable || h.Status != protocol.HealthDraining {
		t.Fatalf("/health while draining: %d %+v", code, h)
	}
	if code, _ := get("/live"); code != http.StatusOK {
		t.Fatalf("/live while draining: %d", code)
	}
}
