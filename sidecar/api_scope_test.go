package sidecar

import (
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

const (
	testBillingReadToken = "0123456789abcdef-billing-ro"
	testBillingOpsToken  = "0123456789abcdef-billing-ops"
)

// scopedTokens writes token files with scoped lines beside old-format ones
// and reads them as the sidecar does at start.
func scopedTokens(t *testing.T) Tokens {
	t.Helper()
	dir := t.TempDir()
	admin := filepath.Join(dir, "admin")
	read := filepath.Join(dir, "read")
	if err := os.WriteFile(admin, []byte("admin:"+testAdminToken+"\n"+
		"billing-ops:"+testBillingOpsToken+" queues=billing.*,payments rights=read,manage\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(read, []byte("grafana:"+testReadToken+"\n"+
		"billing-ro:"+testBillingReadToken+" queues=billing.* rights=read\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens, err := readTokens(admin, read)
	if err != nil {
		t.Fatal(err)
	}
	return tokens
}

func errMessage(out map[string]any) string {
	e, _ := out["error"].(map[string]any)
	s, _ := e["message"].(string)
	return s
}

func queuesOf(t *testing.T, list any, key string) []string {
	t.Helper()
	var names []string
	items, _ := list.([]any)
	for _, it := range items {
		names = append(names, it.(map[string]any)[key].(string))
	}
	slices.Sort(names)
	return slices.Compact(names)
}

func TestScopedTokensSeeAndManageTheirQueuesOnly(t *testing.T) {
	var logged lockedLog // process_test.go
	ts := startSidecar(t, "", Options{Tokens: scopedTokens(t),
		Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: &logged})})
	srv := httptest.NewServer(ts.srv.HTTPHandler())
	defer srv.Close()
	c := ts.client(t)
	fillDeadLetters(t, c, "billing.invoices", 6, 2, func(int) string { return "billing failed" })
	fillDeadLetters(t, c, "orders", 4, 2, func(int) string { return "orders failed" })
	mustPush(t, c, item(t, "payments", "p", "", "x"))

	// /api/auth tells the page the token's scope.
	code, out := apiCall(t, srv, "GET", "/api/auth", testBillingReadToken, nil)
	if code != 200 || out["role"] != "read" || out["scoped"] != true || out["scopeText"] != "queues=billing.* rights=read" {
		t.Fatalf("/api/auth of billing-ro: %d %v", code, out)
	}
	if _, out := apiCall(t, srv, "GET", "/api/auth", testAdminToken, nil); out["scoped"] != false || out["scopeText"] != "queues=* rights=read,manage" {
		t.Fatalf("/api/auth of admin: %v", out)
	}

	// Listings show the read token its queues and no others.
	if _, out := apiCall(t, srv, "GET", "/api/queues", testBillingReadToken, nil); !slices.Equal(queuesOf(t, out["queues"], "queue"), []string{"billing.invoices"}) {
		t.Fatalf("/api/queues of billing-ro: %v", out)
	}
	if _, out := apiCall(t, srv, "GET", "/api/queues", testBillingOpsToken, nil); !slices.Equal(queuesOf(t, out["queues"], "queue"), []string{"billing.invoices", "payments"}) {
		t.Fatalf("/api/queues of billing-ops: %v", out)
	}
	if _, out := apiCall(t, srv, "GET", "/api/queues", testReadToken, nil); len(queuesOf(t, out["queues"], "queue")) != 3 {
		t.Fatalf("/api/queues of an unscoped read token: %v", out)
	}
	code, out = apiCall(t, srv, "GET", "/api/dlq?count=true", testBillingReadToken, nil)
	if code != 200 || !slices.Equal(queuesOf(t, out["entries"], "queue"), []string{"billing.invoices"}) || num(out["count"]) != 6 || len(out["entries"].([]any)) != 6 {
		t.Fatalf("/api/dlq of billing-ro: %d %v", code, out)
	}
	// A page at a time, as one listing of its queues.
	code, out = apiCall(t, srv, "GET", "/api/dlq?limit=4", testBillingReadToken, nil)
	if code != 200 || len(out["entries"].([]any)) != 4 || out["nextAfterId"] == nil {
		t.Fatalf("/api/dlq?limit=4 of billing-ro: %d %v", code, out)
	}
	code, out = apiCall(t, srv, "GET", fmt.Sprintf("/api/dlq?limit=4&afterId=%d", num(out["nextAfterId"])), testBillingReadToken, nil)
	if code != 200 || len(out["entries"].([]any)) != 2 || out["nextAfterId"] != nil || !slices.Equal(queuesOf(t, out["entries"], "queue"), []string{"billing.invoices"}) {
		t.Fatalf("/api/dlq's second page of billing-ro: %d %v", code, out)
	}
	if _, out := apiCall(t, srv, "GET", "/api/dlq?count=true", testReadToken, nil); num(out["count"]) != 10 {
		t.Fatalf("/api/dlq of an unscoped read token: %v", out)
	}
	code, out = apiCall(t, srv, "GET", "/api/dlq/summary", testBillingReadToken, nil)
	if code != 200 || !slices.Equal(queuesOf(t, out["errors"], "queue"), []string{"billing.invoices"}) {
		t.Fatalf("/api/dlq/summary of billing-ro: %d %v", code, out)
	}
	if code, out := apiCall(t, srv, "GET", "/api/history", testBillingReadToken, nil); code != 200 || out["pushed"] == nil {
		t.Fatalf("/api/history of billing-ro: %d %v", code, out)
	}

	// A route about another queue is refused, naming the right and the queue.
	want := `the token "billing-ro" may not read orders: its scope is queues=billing.* rights=read`
	for _, path := range []string{"/api/queues/orders", "/api/queues/orders/partitions", "/api/queues/orders/partitions/p0/messages",
		"/api/queues/orders/partitions/p0/messages/0", "/api/dlq?queue=orders", "/api/dlq/summary?queue=orders", "/api/history?queue=orders"} {
		if code, out := apiCall(t, srv, "GET", path, testBillingReadToken, nil); code != 403 || errCode(out) != "forbidden" || errMessage(out) != want {
			t.Errorf("GET %s with billing-ro: %d %v", path, code, out)
		}
	}
	for _, path := range []string{"/api/queues/billing.invoices", "/api/queues/billing.invoices/partitions", "/api/dlq?queue=billing.invoices"} {
		if code, out := apiCall(t, srv, "GET", path, testBillingReadToken, nil); code != 200 {
			t.Errorf("GET %s with billing-ro: %d %v", path, code, out)
		}
	}
	// A read token still may not write, whatever its queues.
	if code, out := apiCall(t, srv, "POST", "/api/queues/billing.invoices/pause", testBillingReadToken, map[string]any{"paused": true}); code != 403 || errCode(out) != "forbidden" {
		t.Fatalf("a write with billing-ro: %d %v", code, out)
	}

	// The manage token replays its queue's dead letters, by filter and by ids.
	code, out = apiCall(t, srv, "POST", "/api/dlq/replay", testBillingOpsToken, map[string]any{"queue": "billing.invoices", "limit": 4})
	if code != 200 || num(out["replayed"]) != 4 {
		t.Fatalf("replay of billing.invoices by billing-ops: %d %v", code, out)
	}
	_, rest := apiCall(t, srv, "GET", "/api/dlq?queue=billing.invoices", testBillingOpsToken, nil)
	var billingIDs []int64
	for _, e := range rest["entries"].([]any) {
		if e.(map[string]any)["replayedAt"] == nil {
			billingIDs = append(billingIDs, num(e.(map[string]any)["id"]))
		}
	}
	if len(billingIDs) != 2 {
		t.Fatalf("unreplayed entries of billing.invoices: %v", rest)
	}
	if code, out := apiCall(t, srv, "POST", "/api/dlq/replay", testBillingOpsToken, map[string]any{"ids": billingIDs}); code != 200 || num(out["replayed"]) != 2 {
		t.Fatalf("replay by ids by billing-ops: %d %v", code, out)
	}

	// ... and is refused on another queue's, by filter, by its ids, or by
	// ids that mix both queues; nothing is replayed or deleted there.
	_, orders := apiCall(t, srv, "GET", "/api/dlq?queue=orders", testAdminToken, nil)
	var orderIDs []int64
	for _, e := range orders["entries"].([]any) {
		orderIDs = append(orderIDs, num(e.(map[string]any)["id"]))
	}
	wantManage := `the token "billing-ops" may not manage orders: its scope is queues=billing.*,payments rights=read,manage`
	for i, req := range []struct {
		path string
		body map[string]any
	}{
		{"/api/dlq/replay", map[string]any{"queue": "orders"}},
		{"/api/dlq/replay", map[string]any{"ids": orderIDs}},
		{"/api/dlq/replay", map[string]any{"ids": append([]int64{billingIDs[0]}, orderIDs[0])}},
		{"/api/dlq/delete", map[string]any{"queue": "orders"}},
		{"/api/dlq/delete", map[string]any{"ids": orderIDs[:1]}},
		{"/api/queues/orders/pause", map[string]any{"paused": true}},
		{"/api/queues/orders/seek", map[string]any{"group": "g", "to": "beginning"}},
	} {
		if code, out := apiCall(t, srv, "POST", req.path, testBillingOpsToken, req.body); code != 403 || errCode(out) != "forbidden" || errMessage(out) != wantManage {
			t.Errorf("request %d, POST %s %v with billing-ops: %d %v", i, req.path, req.body, code, out)
		}
	}
	if _, out := apiCall(t, srv, "GET", "/api/dlq?queue=orders&count=true", testAdminToken, nil); num(out["count"]) != 4 || num(out["replayedCount"]) != 0 {
		t.Fatalf("orders' dead letters after the refusals: %v", out)
	}
	if _, q := apiCall(t, srv, "GET", "/api/queues/orders", testAdminToken, nil); q["options"].(map[string]any)["consumptionPaused"] != false {
		t.Fatal("a refused pause paused orders")
	}
	if code, out := apiCall(t, srv, "POST", "/api/queues/billing.invoices/pause", testBillingOpsToken, map[string]any{"paused": true}); code != 200 {
		t.Fatalf("pause of billing.invoices by billing-ops: %d %v", code, out)
	}

	// Maintenance is no one queue's: it needs manage on "*".
	code, out = apiCall(t, srv, "POST", "/api/maintenance", testBillingOpsToken, map[string]any{"pop": true})
	if code != 403 || errCode(out) != "forbidden" || !strings.Contains(errMessage(out), `may not manage every queue (*)`) {
		t.Fatalf("maintenance by billing-ops: %d %v", code, out)
	}
	if _, cl := apiCall(t, srv, "GET", "/api/cluster", testAdminToken, nil); cl["maintenance"] != nil {
		if m := cl["maintenance"].(map[string]any); m["pop"] == true {
			t.Fatal("a refused maintenance turned pop maintenance on")
		}
	}
	if code, out := apiCall(t, srv, "POST", "/api/maintenance", testAdminToken, map[string]any{}); code != 200 {
		t.Fatalf("maintenance's state with the admin token: %d %v", code, out)
	}

	// Writes and refusals are logged under the token's name.
	log := logged.String()
	if !strings.Contains(log, "dashboard write refused") || !strings.Contains(log, "token=billing-ops") || !strings.Contains(log, "path=/api/dlq/replay") {
		t.Fatalf("the refused writes are not logged with their token:\n%s", log)
	}
	if strings.Contains(log, testBillingOpsToken) || strings.Contains(log, testBillingReadToken) {
		t.Fatal("a token was logged")
	}
}
