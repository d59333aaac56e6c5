package sidecar

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
)

// historyUntil polls /api/history (with query) until ok accepts it.
func historyUntil(t *testing.T, srv *httptest.Server, query string, ok func(h map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, h := apiCall(t, srv, "GET", "/api/history"+query, "", nil)
		if code != 200 {
			t.Fatalf("/api/history%s: %d %v", query, code, h)
		}
		if ok(h) {
			return h
		}
		if time.Now().After(deadline) {
			t.Fatalf("/api/history%s never showed what was expected; last: %v", query, h)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// getBody is url's body, after a 200.
func getBody(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return string(b)
}

func series(v any) []any { s, _ := v.([]any); return s }

func last(v any) any {
	s := series(v)
	if len(s) == 0 {
		return nil
	}
	return s[len(s)-1]
}

// groupLag is the lag series of group in the history's queue, nil if absent.
func groupLag(h map[string]any, group string) []any {
	q, _ := h["queue"].(map[string]any)
	for _, g := range series(q["groups"]) {
		if g := g.(map[string]any); g["group"] == group {
			return series(g["lag"])
		}
	}
	return nil
}

func TestHistoryAPIServesSamplesThatFollowTheTraffic(t *testing.T) {
	// A sample must be read within the interval: on Citus, on a busy
	// machine, the round trip alone took up to 49 ms, and 50 ms left gaps.
	ts := startSidecar(t, "", Options{HistoryInterval: 300 * time.Millisecond})
	c := ts.client(t)
	var items []protocol.PushItem
	for i := range 30 {
		items = append(items, item(t, "orders", []string{"eu", "us", "apac"}[i%3], "", i))
	}
	mustPush(t, c, items...)
	mustPush(t, c, item(t, "other", "x", "", 1), item(t, "other", "x", "", 2))
	ack := func(n int) {
		res := mustPop(t, c, protocol.PopArgs{Queue: "orders", Partition: "eu", Group: "g", Batch: n})
		var acks []protocol.AckItem
		for _, m := range res.Messages {
			acks = append(acks, queenside.Completed(m))
		}
		mustAck(t, c, acks...)
	}
	ack(4) // g: 4 consumed, lag 26

	// Sampling starts with the dashboard.
	srv := httptest.NewServer(ts.srv.HTTPHandler())
	defer srv.Close()
	h := historyUntil(t, srv, "?queue=orders", func(h map[string]any) bool {
		lag := groupLag(h, "g")
		return len(lag) > 0 && num(lag[len(lag)-1]) == 26
	})
	q := h["queue"].(map[string]any)
	if q["queue"] != "orders" || num(last(q["pushed"])) != 30 || num(last(q["consumed"])) != 4 {
		t.Fatalf("orders: %v", q)
	}
	// The totals are every queue's.
	if num(last(h["pushed"])) != 32 || num(last(h["consumed"])) != 4 {
		t.Fatalf("totals: pushed %v consumed %v", h["pushed"], h["consumed"])
	}
	if lat, ok := last(h["databaseLatencyMs"]).(float64); !ok || lat <= 0 {
		t.Fatalf("database latency: %v", h["databaseLatencyMs"])
	}
	// This sidecar has no spool: 0 records, as /api/spool says.
	if s, ok := last(h["spoolRecords"]).(float64); !ok || s != 0 {
		t.Fatalf("spool records without a spool: %v", s)
	}
	if num(h["intervalMs"]) != 300 || num(h["capacity"]) != 180 {
		t.Fatalf("interval %v, capacity %v", h["intervalMs"], h["capacity"])
	}

	// More traffic: later samples follow it, and the earlier ones stay.
	var more []protocol.PushItem
	for i := range 20 {
		more = append(more, item(t, "orders", "eu", "", i))
	}
	mustPush(t, c, more...)
	// g: 14 consumed of 50, lag 36; the ack carries a pop that leases 3
	// more, so this sidecar has popped 17.
	res := mustPop(t, c, protocol.PopArgs{Queue: "orders", Partition: "eu", Group: "g", Batch: 10})
	var acks []protocol.AckItem
	for _, m := range res.Messages {
		acks = append(acks, queenside.Completed(m))
	}
	if r, err := c.AckAndPop(testContext(t), protocol.PopArgs{Queue: "orders", Partition: "eu", Group: "g", Batch: 3}, acks...); err != nil || r.Pop == nil || len(r.Pop.Messages) != 3 {
		t.Fatalf("ack carrying a pop: %v %+v", err, r)
	}
	h = historyUntil(t, srv, "?queue=orders", func(h map[string]any) bool {
		lag := groupLag(h, "g")
		return len(lag) > 0 && num(lag[len(lag)-1]) == 36 && num(last(h["popped"])) == 17
	})
	at, pushed, popped, lag := series(h["at"]), series(h["pushed"]), series(h["popped"]), groupLag(h, "g")
	if len(at) != len(pushed) || len(at) != len(popped) || len(at) != len(lag) || len(at) < 2 {
		t.Fatalf("series of unequal lengths: %d times, %d pushed, %d popped, %d lag", len(at), len(pushed), len(popped), len(lag))
	}
	before, after := -1, -1
	for i := range at {
		if i > 0 {
			t0, _ := time.Parse(time.RFC3339Nano, at[i-1].(string))
			t1, _ := time.Parse(time.RFC3339Nano, at[i].(string))
			if !t1.After(t0) {
				t.Fatalf("times out of order at %d: %v", i, at)
			}
		}
		switch {
		case num(pushed[i]) == 32 && num(lag[i]) == 26 && num(popped[i]) == 4:
			before = i
		case num(pushed[i]) == 52 && num(lag[i]) == 36 && num(popped[i]) == 17:
			after = i
		}
	}
	if before < 0 || after < 0 || before > after {
		t.Fatalf("want a sample of the first traffic before one of the second: pushed %v, popped %v, lag %v", pushed, popped, lag)
	}
	if num(last(h["consumed"])) != 14 {
		t.Fatalf("consumed: %v", h["consumed"])
	}
	// The live figures the cluster page and /metrics give agree.
	if _, cl := apiCall(t, srv, "GET", "/api/cluster", "", nil); num(cl["popped"]) != 17 {
		t.Fatalf("/api/cluster popped: %v", cl["popped"])
	}
	if body := getBody(t, srv.URL+"/metrics"); !strings.Contains(body, "\nqueenside_messages_popped_total 17\n") ||
		!strings.Contains(body, "\nqueenside_leases_granted_total 3\n") {
		t.Fatalf("/metrics after 17 messages popped under 3 leases:\n%s", body)
	}

	// A queue that is not kept has no series; a bad name is refused.
	if _, h := apiCall(t, srv, "GET", "/api/history?queue=nosuch", "", nil); h["queue"] != nil {
		t.Fatalf("unknown queue: %v", h["queue"])
	}
	if code, out := apiCall(t, srv, "GET", "/api/history?queue=bad%20name", "", nil); code != 400 || errCode(out) != "invalid_argument" {
		t.Fatalf("bad queue name: %d %v", code, out)
	}
	if code, out := apiCall(t, srv, "GET", "/api/history?queue=", "", nil); code != 400 || errCode(out) != "invalid_argument" {
		t.Fatalf("empty queue name: %d %v", code, out)
	}
}

// While PostgreSQL is unreachable the history still answers, and what the
// database would have told is a gap, not a zero.
func TestHistoryAPIShowsAnUnreachableDatabaseAsGaps(t *testing.T) {
	srv, _ := serveWithoutDatabase(t, nil)
	hs := httptest.NewServer(srv.HTTPHandler())
	defer hs.Close()
	h := historyUntil(t, hs, "", func(h map[string]any) bool { return len(series(h["at"])) > 0 })
	if p, c, l := series(h["pushed"]), series(h["consumed"]), series(h["databaseLatencyMs"]); p[0] != nil || c[0] != nil || l[0] != nil {
		t.Fatalf("without a database: pushed %v, consumed %v, latency %v; want gaps", p, c, l)
	}
}

func TestHistoryCanBeTurnedOff(t *testing.T) {
	ts := startSidecar(t, "", Options{HistoryInterval: -1})
	srv := httptest.NewServer(ts.srv.HTTPHandler())
	defer srv.Close()
	mustPush(t, ts.client(t), item(t, "orders", "eu", "", 1))
	time.Sleep(300 * time.Millisecond)
	code, h := apiCall(t, srv, "GET", "/api/history", "", nil)
	if code != 200 || len(series(h["at"])) != 0 || num(h["intervalMs"]) != 5000 {
		t.Fatalf("/api/history with the history off: %d %v", code, h)
	}
}
