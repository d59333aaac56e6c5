package sidecar

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
)

const testAdminToken = "0123456789abcdef-admin"

// apiCall sends a request to the dashboard's API and decodes its JSON.
func apiCall(t *testing.T, srv *httptest.Server, method, path, token string, body any) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("%s %s: %d, not JSON: %v", method, path, resp.StatusCode, err)
	}
	return resp.StatusCode, out
}

func num(v any) int64 {
	f, _ := v.(float64)
	return int64(f)
}

func errCode(out map[string]any) string {
	e, _ := out["error"].(map[string]any)
	s, _ := e["code"].(string)
	return s
}

func TestDashboardAPIReadsQueuesGroupsAndPartitions(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	srv := httptest.NewServer(ts.srv.HTTPHandler())
	defer srv.Close()
	c := ts.client(t)
	// 250 partitions of one message, and 5 more messages in p-000.
	var items []protocol.PushItem
	for i := range 250 {
		items = append(items, item(t, "orders", fmt.Sprintf("p-%03d", i), "", i))
	}
	for i := range 5 {
		items = append(items, item(t, "orders", "p-000", "", i))
	}
	mustPush(t, c, items...)
	mustPush(t, c, item(t, "other", "x", "", "x"))
	// Group g takes p-000's 6 messages and acks 4 of them.
	res := mustPop(t, c, protocol.PopArgs{Queue: "orders", Partition: "p-000", Group: "g", Batch: 6})
	var acks []protocol.AckItem
	for _, m := range res.Messages[:4] {
		acks = append(acks, queenside.Completed(m))
	}
	mustAck(t, c, acks...)

	code, out := apiCall(t, srv, "GET", "/api/queues", "", nil)
	if code != 200 {
		t.Fatalf("/api/queues: %d %v", code, out)
	}
	qs := out["queues"].([]any)
	if len(qs) != 2 {
		t.Fatalf("queues: %v", qs)
	}
	orders := qs[0].(map[string]any)
	if orders["queue"] != "orders" || num(orders["partitions"]) != 250 || num(orders["messages"]) != 255 ||
		num(orders["pushed"]) != 255 || num(orders["consumed"]) != 4 || num(orders["groups"]) != 1 {
		t.Fatalf("orders: %v", orders)
	}
	if opts := orders["options"].(map[string]any); num(opts["leaseSeconds"]) != 60 {
		t.Fatalf("options: %v", opts)
	}

	code, out = apiCall(t, srv, "GET", "/api/queues/orders", "", nil)
	if code != 200 {
		t.Fatalf("/api/queues/orders: %d %v", code, out)
	}
	groups := out["groups"].([]any)
	g := groups[0].(map[string]any)
	// The group's cursors: p-000 at 4 of 6; the other 249 partitions are
	// counted from the start, where the group's subscription begins.
	if len(groups) != 1 || g["group"] != "g" || num(g["lag"]) != 2+249 || num(g["consumed"]) != 4 ||
		num(g["leasedPartitions"]) != 1 || g["oldestUnconsumedAt"] == nil {
		t.Fatalf("groups: %v", groups)
	}

	// Paging through 250 partitions, 100 at a time, in name order.
	var names []string
	after := ""
	for pages := 0; ; pages++ {
		if pages > 3 {
			t.Fatal("paging does not end")
		}
		code, out = apiCall(t, srv, "GET", "/api/queues/orders/partitions?limit=100&after="+after, "", nil)
		if code != 200 {
			t.Fatalf("partitions: %d %v", code, out)
		}
		for _, p := range out["partitions"].([]any) {
			names = append(names, p.(map[string]any)["partition"].(string))
		}
		next, ok := out["next"].(string)
		if !ok {
			break
		}
		after = next
	}
	if len(names) != 250 || !slices.IsSorted(names) || names[0] != "p-000" || names[249] != "p-249" {
		t.Fatalf("paged %d names: %v ... ", len(names), names[:3])
	}
	code, out = apiCall(t, srv, "GET", "/api/queues/orders/partitions?prefix=p-00&limit=5", "", nil)
	page := out["partitions"].([]any)
	if code != 200 || len(page) != 5 || out["next"] != "p-004" {
		t.Fatalf("prefix page: %d %v", code, out)
	}
	code, out = apiCall(t, srv, "GET", "/api/queues/orders/partitions?prefix=p-00&after=p-004", "", nil)
	if page = out["partitions"].([]any); code != 200 || len(page) != 5 || out["next"] != nil {
		t.Fatalf("prefix's last page: %d %v", code, out)
	}
	code, out = apiCall(t, srv, "GET", "/api/queues/orders/partitions?prefix=p-000", "", nil)
	p0 := out["partitions"].([]any)[0].(map[string]any)
	cur := p0["groups"].([]any)[0].(map[string]any)
	if num(p0["headOffset"]) != 6 || num(p0["messages"]) != 6 || cur["group"] != "g" || num(cur["cursor"]) != 4 ||
		num(cur["lag"]) != 2 || cur["leased"] != true || cur["leaseExpiresAt"] == nil {
		t.Fatalf("p-000: %v", p0)
	}

	for path, want := range map[string]int{
		"/api/queues/nope":                        404,
		"/api/queues/nope/partitions":             404,
		"/api/queues/orders/partitions?limit=0":   400,
		"/api/queues/orders/partitions?limit=x":   400,
		"/api/dlq?limit=501":                      400,
		"/api/nothing":                            404,
		"/api/queues/orders/partitions?limit=500": 200,
	} {
		if code, out := apiCall(t, srv, "GET", path, "", nil); code != want || (want != 200 && errCode(out) == "") {
			t.Errorf("GET %s: %d %v, want %d", path, code, out, want)
		}
	}

	code, out = apiCall(t, srv, "GET", "/api/cluster", "", nil)
	sidecars, _ := out["sidecars"].([]any)
	db := out["database"].(map[string]any)
	if code != 200 || db["ok"] != true || db["serverVersion"] == nil || len(sidecars) == 0 ||
		!strings.HasPrefix(sidecars[0].(map[string]any)["name"].(string), "queenside") {
		t.Fatalf("/api/cluster: %d %v", code, out)
	}
	code, out = apiCall(t, srv, "GET", "/api/spool", "", nil)
	if code != 200 || out["enabled"] != false || num(out["records"]) != 0 {
		t.Fatalf("/api/spool: %d %v", code, out)
	}

	// The dashboard itself.
	resp, err := http.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	page0, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Contains(page0, []byte("<html")) {
		t.Fatalf("GET /: %d %.200s", resp.StatusCode, page0)
	}
}

func TestDashboardWritesNeedTheAdminToken(t *testing.T) {
	ts := startSidecar(t, "", Options{Tokens: AdminTokens(testAdminToken)})
	srv := httptest.NewServer(ts.srv.HTTPHandler())
	defer srv.Close()
	c := ts.client(t)
	configure(t, c, "d", func(o *protocol.QueueOptions) { o.RetryLimit = 0 })
	deadLetter(t, c, "d", "p1", "first", "broken")

	code, out := apiCall(t, srv, "GET", "/api/dlq?queue=d", "", nil)
	entries, _ := out["entries"].([]any)
	if code != 200 || len(entries) != 1 {
		t.Fatalf("/api/dlq: %d %v", code, out)
	}
	e := entries[0].(map[string]any)
	// The payload is shown as the value pushed, with its stored size.
	if e["payload"] != "first" || num(e["payloadBytes"]) != 6 || e["error"] != "broken" || e["partition"] != "p1" || e["replayedAt"] != nil {
		t.Fatalf("entry: %v", e)
	}
	if _, all := apiCall(t, srv, "GET", "/api/dlq", "", nil); len(all["entries"].([]any)) != 1 {
		t.Fatalf("/api/dlq of every queue: %v", all)
	}
	id := num(e["id"])
	replay := map[string]any{"ids": []int64{id}}
	for _, token := range []string{"", "wrong-token-of-some-length", testAdminToken + "x"} {
		if code, out := apiCall(t, srv, "POST", "/api/dlq/replay", token, replay); code != 403 || errCode(out) != "forbidden" {
			t.Fatalf("replay with token %q: %d %v", token, code, out)
		}
	}
	if code, out := apiCall(t, srv, "GET", "/api/auth", "nope", nil); code != 403 || errCode(out) != "forbidden" {
		t.Fatalf("/api/auth with a wrong token: %d %v", code, out)
	}
	if code, _ := apiCall(t, srv, "GET", "/api/auth", testAdminToken, nil); code != 200 {
		t.Fatalf("/api/auth with the token: %d", code)
	}
	// Refused writes changed nothing.
	if _, again := apiCall(t, srv, "GET", "/api/dlq?queue=d", "", nil); again["entries"].([]any)[0].(map[string]any)["replayedAt"] != nil {
		t.Fatal("a refused replay was recorded")
	}

	code, out = apiCall(t, srv, "POST", "/api/dlq/replay", testAdminToken, replay)
	results, _ := out["results"].([]any)
	if code != 200 || len(results) != 1 || results[0].(map[string]any)["status"] != "queued" {
		t.Fatalf("replay: %d %v", code, out)
	}
	if _, again := apiCall(t, srv, "GET", "/api/dlq?queue=d", "", nil); again["entries"].([]any)[0].(map[string]any)["replayedAt"] == nil {
		t.Fatal("the replay is not recorded on the entry")
	}
	if res := mustPop(t, c, protocol.PopArgs{Queue: "d", Partition: "p1", Group: "g"}); len(res.Messages) != 1 {
		t.Fatalf("the replayed message is not delivered: %+v", res)
	}
	if code, out := apiCall(t, srv, "POST", "/api/dlq/replay", testAdminToken, map[string]any{"ids": "x"}); code != 400 {
		t.Fatalf("a bad replay body: %d %v", code, out)
	}

	// Seek moves a group's cursor back, with the token only.
	seek := map[string]any{"group": "g", "partition": "p1", "to": "beginning"}
	if code, out := apiCall(t, srv, "POST", "/api/queues/d/seek", "", seek); code != 403 {
		t.Fatalf("seek without the token: %d %v", code, out)
	}
	code, out = apiCall(t, srv, "POST", "/api/queues/d/seek", testAdminToken, seek)
	cursors, _ := out["cursors"].([]any)
	if code != 200 || len(cursors) != 1 || num(cursors[0].(map[string]any)["cursor"]) != 0 {
		t.Fatalf("seek: %d %v", code, out)
	}
	if code, out := apiCall(t, srv, "POST", "/api/queues/d/seek", testAdminToken, map[string]any{"group": "g", "to": "someday"}); code != 400 {
		t.Fatalf("a bad seek: %d %v", code, out)
	}

	// Pausing a queue and maintenance, with the token only.
	if code, out := apiCall(t, srv, "POST", "/api/queues/d/pause", "", map[string]any{"paused": true}); code != 403 {
		t.Fatalf("pause without the token: %d %v", code, out)
	}
	code, out = apiCall(t, srv, "POST", "/api/queues/d/pause", testAdminToken, map[string]any{"paused": true})
	if opts, _ := out["options"].(map[string]any); code != 200 || opts["consumptionPaused"] != true || num(opts["retryLimit"]) != 0 {
		t.Fatalf("pause: %d %v", code, out)
	}
	if res := mustPop(t, c, protocol.PopArgs{Queue: "d", Group: "h"}); len(res.Messages) != 0 || !res.Paused {
		t.Fatalf("a pop of the paused queue: %+v", res)
	}
	if _, q := apiCall(t, srv, "GET", "/api/queues/d", "", nil); q["options"].(map[string]any)["consumptionPaused"] != true {
		t.Fatalf("/api/queues/d while paused: %v", q)
	}
	apiCall(t, srv, "POST", "/api/queues/d/pause", testAdminToken, map[string]any{"paused": false})
	if res := mustPop(t, c, protocol.PopArgs{Queue: "d", Group: "h"}); len(res.Messages) != 1 || res.Paused {
		t.Fatalf("a pop of the resumed queue: %+v", res)
	}
	if code, out := apiCall(t, srv, "POST", "/api/maintenance", "", map[string]any{"pop": true}); code != 403 {
		t.Fatalf("maintenance without the token: %d %v", code, out)
	}
	if code, out := apiCall(t, srv, "POST", "/api/maintenance", testAdminToken, map[string]any{"pop": true}); code != 200 || out["pop"] != true || out["push"] != false {
		t.Fatalf("maintenance: %d %v", code, out)
	}
	if _, cl := apiCall(t, srv, "GET", "/api/cluster", "", nil); cl["maintenance"].(map[string]any)["pop"] != true {
		t.Fatalf("/api/cluster during maintenance: %v", cl["maintenance"])
	}
	if code, out := apiCall(t, srv, "POST", "/api/maintenance", testAdminToken, map[string]any{"pop": false}); code != 200 || out["pop"] != false {
		t.Fatalf("maintenance off: %d %v", code, out)
	}

	// A sidecar without a token refuses every write.
	open := startSidecar(t, ts.dbURL, Options{})
	osrv := httptest.NewServer(open.srv.HTTPHandler())
	defer osrv.Close()
	if code, out := apiCall(t, osrv, "POST", "/api/dlq/replay", testAdminToken, replay); code != 403 || errCode(out) != "writes_disabled" {
		t.Fatalf("replay on a sidecar without a token: %d %v", code, out)
	}
	if _, info := apiCall(t, osrv, "GET", "/api/info", "", nil); info["writes"] != "disabled" {
		t.Fatalf("/api/info: %v", info)
	}
}
