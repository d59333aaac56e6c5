package sidecar

import (
	"fmt"
	"net/http/httptest"
	"testing"
)

func TestDashboardAPIBulkDeadLetters(t *testing.T) {
	ts := startSidecar(t, "", Options{Tokens: AdminTokens(testAdminToken)})
	srv := httptest.NewServer(ts.srv.HTTPHandler())
	defer srv.Close()
	c := ts.client(t)
	fillDeadLetters(t, c, "b", 40, 4, func(i int) string {
		if i%4 == 0 {
			return "schema mismatch"
		}
		return "upstream 503"
	})

	code, out := apiCall(t, srv, "GET", "/api/dlq?queue=b&errorContains=503&count=true&limit=5", "", nil)
	if code != 200 || num(out["count"]) != 30 || num(out["replayedCount"]) != 0 || len(out["entries"].([]any)) != 5 {
		t.Fatalf("filtered listing: %d %v", code, out)
	}
	code, out = apiCall(t, srv, "GET", "/api/dlq/summary?queue=b", "", nil)
	errs, _ := out["errors"].([]any)
	if code != 200 || len(errs) != 2 {
		t.Fatalf("summary: %d %v", code, out)
	}
	if top := errs[0].(map[string]any); top["error"] != "upstream 503" || num(top["count"]) != 30 || top["group"] != "g" || top["firstDeadAt"] == nil {
		t.Fatalf("summary's first row: %v", top)
	}

	// Everything matching the filter, a batch of 7 a request, as the page
	// does it; then again, which replays nothing.
	replayAll := func() (replayed, skipped, batches int64) {
		body := map[string]any{"queue": "b", "errorContains": "503", "limit": 7}
		for {
			code, out := apiCall(t, srv, "POST", "/api/dlq/replay", testAdminToken, body)
			if code != 200 || num(out["failed"]) != 0 {
				t.Fatalf("replay batch: %d %v", code, out)
			}
			replayed, skipped, batches = replayed+num(out["replayed"]), skipped+num(out["skipped"]), batches+1
			if out["nextAfterId"] == nil {
				return
			}
			body["afterId"] = num(out["nextAfterId"])
		}
	}
	if r, s, b := replayAll(); r != 30 || s != 0 || b != 5 {
		t.Fatalf("first run: %d replayed, %d skipped in %d batches", r, s, b)
	}
	if r, s, _ := replayAll(); r != 0 || s != 30 {
		t.Fatalf("second run: %d replayed, %d skipped", r, s)
	}
	if _, out := apiCall(t, srv, "GET", "/api/dlq?queue=b&count=true&limit=1", "", nil); num(out["count"]) != 40 || num(out["replayedCount"]) != 30 {
		t.Fatalf("counts after the replay: %v", out)
	}

	del := map[string]any{"queue": "b", "errorContains": "schema"}
	if code, out := apiCall(t, srv, "POST", "/api/dlq/delete", "", del); code != 403 {
		t.Fatalf("delete without the token: %d %v", code, out)
	}
	if code, out := apiCall(t, srv, "POST", "/api/dlq/delete", testAdminToken, del); code != 200 || num(out["deleted"]) != 10 || out["nextAfterId"] != nil {
		t.Fatalf("delete by filter: %d %v", code, out)
	}
	if _, out := apiCall(t, srv, "GET", "/api/dlq?queue=b&count=true&limit=1", "", nil); num(out["count"]) != 30 {
		t.Fatalf("count after the delete: %v", out)
	}

	for path, want := range map[string]string{
		"/api/dlq?queue=b&deadFrom=yesterday":                                        "invalid_argument",
		"/api/dlq?queue=b&count=maybe":                                               "invalid_argument",
		"/api/dlq?queue=b&deadFrom=2026-01-02T00:00:00Z&deadTo=2026-01-01T00:00:00Z": "invalid_argument",
		"/api/dlq/summary?limit=0":                                                   "invalid_argument",
		"/api/dlq/summary?queue=nope":                                                "not_found",
	} {
		if _, out := apiCall(t, srv, "GET", path, "", nil); errCode(out) != want {
			t.Errorf("GET %s: %v, want %s", path, out, want)
		}
	}
	for i, body := range []map[string]any{{}, {"ids": []int{1}, "queue": "b"}, {"queue": "b", "limit": 5000}} {
		if code, out := apiCall(t, srv, "POST", "/api/dlq/delete", testAdminToken, body); code != 400 || errCode(out) != "invalid_argument" {
			t.Errorf("delete body %d %s: %d %v", i, fmt.Sprint(body), code, out)
		}
	}
}
