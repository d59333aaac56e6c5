package sidecar

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
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

// The profiling endpoints answer admin tokens only, and none at all on a
// sidecar without one; the command line they show hides a database
// password.
func TestProfilingNeedsAnAdminToken(t *testing.T) {
	get := func(h http.Handler, path, token string) (int, string) {
		t.Helper()
		srv := httptest.NewServer(h)
		defer srv.Close()
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	open := startSidecar(t, "", Options{})
	if code, body := get(open.srv.withProfiling(open.srv.HTTPHandler()), "/debug/pprof/cmdline", ""); code != http.StatusForbidden ||
		!strings.Contains(body, "profiling needs an admin token") {
		t.Fatalf("without tokens: %d %s", code, body)
	}
	ts := startSidecar(t, open.dbURL, Options{Tokens: AdminTokens(testAdminToken)})
	h := ts.srv.withProfiling(ts.srv.HTTPHandler())
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/symbol"} {
		if code, _ := get(h, path, ""); code != http.StatusForbidden {
			t.Fatalf("%s without a token: %d", path, code)
		}
		if code, _ := get(h, path, "not-the-token"); code != http.StatusForbidden {
			t.Fatalf("%s with a wrong token: %d", path, code)
		}
		if code, _ := get(h, path, testAdminToken); code != http.StatusOK {
			t.Fatalf("%s with the admin token: %d", path, code)
		}
	}
	if code, _ := get(h, "/live", ""); code != http.StatusOK {
		t.Fatalf("/live behind profiling: %d", code)
	}
	for _, tc := range []struct{ in, want []string }{
		{[]string{"queenside", "serve", "--database-url", "postgres://app:Pw-S3cr3t@db:5432/q?sslmode=disable"},
			[]string{"queenside", "serve", "--database-url", "postgres://app:xxxxx@db:5432/q?sslmode=disable"}},
		{[]string{"--database-url=postgres://app:Pw-S3cr3t@db/q"}, []string{"--database-url=postgres://app:xxxxx@db/q"}},
		{[]string{"--database-url", "host=db user=app password=Pw-S3cr3t dbname=q"}, []string{"--database-url", "host=db user=app password=xxxxx dbname=q"}},
		{[]string{"--database-url", "host=db password='a S3cr3t' dbname=q"}, []string{"--database-url", "host=db password=xxxxx dbname=q"}},
		{[]string{"--database-url", "postgres://db/q?user=app&password=Pw-S3cr3t"}, []string{"--database-url", "postgres://db/q?user=app&password=xxxxx"}},
		{[]string{"--socket", "/run/q.sock", "--http-addr=:8080"}, []string{"--socket", "/run/q.sock", "--http-addr=:8080"}},
	} {
		if got := RedactedArgs(tc.in); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("RedactedArgs(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
