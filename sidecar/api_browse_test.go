package sidecar

import (
	"fmt"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/crypt"
)

// browsePath is the messages endpoint of a partition, with a query.
func browsePath(queue, partition, query string) string {
	p := "/api/queues/" + url.PathEscape(queue) + "/partitions/" + url.PathEscape(partition) + "/messages"
	if query != "" {
		p += "?" + query
	}
	return p
}

func mustGet(t *testing.T, srv *httptest.Server, path string) map[string]any {
	t.Helper()
	code, out := apiCall(t, srv, "GET", path, "", nil)
	if code != 200 {
		t.Fatalf("GET %s: %d %v", path, code, out)
	}
	return out
}

// pageOffsets lists the offsets of a page's messages.
func pageOffsets(page map[string]any) []int64 {
	var out []int64
	for _, m := range page["messages"].([]any) {
		out = append(out, num(m.(map[string]any)["offset"]))
	}
	return out
}

func offsetSpan(from, to int64) []int64 {
	var out []int64
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

// pushRun pushes n messages {"i": first..} in one call, with transaction
// ids tx-<i>, and returns their commit time.
func pushRun(t *testing.T, c *queenside.Client, queue, partition string, first, n int) time.Time {
	t.Helper()
	var items []protocol.PushItem
	for i := first; i < first+n; i++ {
		it := item(t, queue, partition, fmt.Sprintf("tx-%d", i), map[string]any{"i": i})
		it.TraceID = fmt.Sprintf("trace-%d", i)
		it.Headers = map[string]string{"n": fmt.Sprint(i)}
		items = append(items, it)
	}
	return mustPush(t, c, items...)[0].CommittedAt
}

// A partition's messages a page at a time: the newest, from an offset
// (inside a segment), from a time, and past the head; each message with
// its transaction id, trace id, headers and payload.
func TestMessageBrowserPages(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	srv := httptest.NewServer(ts.srv.HTTPHandler())
	defer srv.Close()
	c := ts.client(t)
	const q, p = "orders", "eu/west 1" // a partition name with a slash and a space
	// Segments of 1, 7, 42 and 200 messages: 250 in all.
	var times []time.Time
	first := 0
	for _, n := range []int{1, 7, 42, 200} {
		times = append(times, pushRun(t, c, q, p, first, n))
		first += n
		time.Sleep(20 * time.Millisecond)
	}

	newest := mustGet(t, srv, browsePath(q, p, ""))
	if got := pageOffsets(newest); !reflect.DeepEqual(got, offsetSpan(200, 249)) {
		t.Fatalf("newest page: %v", got)
	}
	if num(newest["headOffset"]) != 250 || num(newest["firstOffset"]) != 0 || num(newest["older"]) != 150 || newest["newer"] != nil {
		t.Fatalf("newest page: %v", newest)
	}
	m := newest["messages"].([]any)[0].(map[string]any)
	pl := m["payload"].(map[string]any)
	if m["transactionId"] != "tx-200" || m["traceId"] != "trace-200" || m["headers"].(map[string]any)["n"] != "200" ||
		pl["kind"] != "msgpack" || pl["preview"] != `{"i":200}` || m["committedAt"] == nil || m["messageId"] == "" {
		t.Fatalf("offset 200: %v", m)
	}
	if _, whole := pl["value"]; whole {
		t.Fatalf("a page carries previews, not whole payloads: %v", pl)
	}

	// From offset 5, in the 7-message segment, across three segments.
	page := mustGet(t, srv, browsePath(q, p, "from=5&limit=10"))
	if got := pageOffsets(page); !reflect.DeepEqual(got, offsetSpan(5, 14)) || num(page["newer"]) != 15 || num(page["older"]) != 0 {
		t.Fatalf("from 5: %v", page)
	}
	for _, e := range page["messages"].([]any) {
		e := e.(map[string]any)
		if want := fmt.Sprintf(`{"i":%d}`, num(e["offset"])); e["payload"].(map[string]any)["preview"] != want ||
			e["transactionId"] != fmt.Sprintf("tx-%d", num(e["offset"])) {
			t.Fatalf("offset %d: %v", num(e["offset"]), e)
		}
	}

	// From a time: the third push's commit time starts at its first offset.
	page = mustGet(t, srv, browsePath(q, p, "limit=3&at="+url.QueryEscape(times[2].Format(time.RFC3339Nano))))
	if got := pageOffsets(page); !reflect.DeepEqual(got, []int64{8, 9, 10}) {
		t.Fatalf("from %v: %v", times[2], page)
	}
	page = mustGet(t, srv, browsePath(q, p, "at="+url.QueryEscape(time.Now().Add(time.Hour).Format(time.RFC3339))))
	if len(page["messages"].([]any)) != 0 || !strings.Contains(page["note"].(string), "no message stored was committed at or after") {
		t.Fatalf("from a time to come: %v", page)
	}

	// Past the head: empty, and it says so.
	for _, from := range []string{"250", "100000"} {
		page = mustGet(t, srv, browsePath(q, p, "from="+from))
		if len(page["messages"].([]any)) != 0 || page["newer"] != nil ||
			!strings.Contains(page["note"].(string), "the head offset is 250") {
			t.Fatalf("from %s: %v", from, page)
		}
	}
	// The last page, cut short by the head.
	page = mustGet(t, srv, browsePath(q, p, "from=245&limit=100"))
	if got := pageOffsets(page); !reflect.DeepEqual(got, offsetSpan(245, 249)) || page["newer"] != nil {
		t.Fatalf("from 245: %v", page)
	}
	// 500 at most, in one page.
	page = mustGet(t, srv, browsePath(q, p, "from=0&limit=500"))
	if got := pageOffsets(page); !reflect.DeepEqual(got, offsetSpan(0, 249)) {
		t.Fatalf("limit 500: %d messages", len(got))
	}

	// One message, its whole payload.
	one := mustGet(t, srv, browsePath(q, p, "")+"/17")
	if num(one["offset"]) != 17 || one["transactionId"] != "tx-17" ||
		!reflect.DeepEqual(one["payload"].(map[string]any)["value"], map[string]any{"i": float64(17)}) {
		t.Fatalf("offset 17: %v", one)
	}
}

// Bad input is refused with the API's error shape, never a crash.
func TestMessageBrowserRefusesBadInput(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	srv := httptest.NewServer(ts.srv.HTTPHandler())
	defer srv.Close()
	c := ts.client(t)
	pushRun(t, c, "orders", "p", 0, 5)
	for _, tc := range []struct {
		path, code string
		status     int
	}{
		{browsePath("orders", "p", "from=-1"), "invalid_argument", 400},
		{browsePath("orders", "p", "from=abc"), "invalid_argument", 400},
		{browsePath("orders", "p", "limit=0"), "invalid_argument", 400},
		{browsePath("orders", "p", "limit=501"), "invalid_argument", 400},
		{browsePath("orders", "p", "at=yesterday"), "invalid_argument", 400},
		{browsePath("orders", "p", "from=1&at=2026-01-01T00:00:00Z"), "invalid_argument", 400},
		{browsePath("orders", "p", "transactionId="), "invalid_argument", 400},
		{browsePath("orders", "p", "transactionId="+strings.Repeat("x", 300)), "invalid_argument", 400},
		{browsePath("orders", "nope", ""), "not_found", 404},
		{browsePath("nope", "p", ""), "not_found", 404},
		{browsePath("bad name!", "p", ""), "invalid_argument", 400},
		{browsePath("orders", "p", "group=nobody"), "not_found", 404},
		{browsePath("orders", "p", "") + "/5", "not_found", 404},
		{browsePath("orders", "p", "") + "/-1", "invalid_argument", 400},
		{browsePath("orders", "p", "") + "/x", "invalid_argument", 400},
		{browsePath("orders", "p", "") + "/1?group=nobody", "not_found", 404},
	} {
		code, out := apiCall(t, srv, "GET", tc.path, "", nil)
		msg, _ := out["error"].(map[string]any)["message"].(string)
		if code != tc.status || errCode(out) != tc.code || msg == "" {
			t.Errorf("GET %s: %d %v; want %d %s", tc.path, code, out, tc.status, tc.code)
		}
	}
}

// A group's cursor and lease show on the message rows; browsing moves
// neither: the cursors row is the same after, and the lease still acks.
func TestMessageBrowserShowsAGroupAndChangesNothing(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	srv := httptest.NewServer(ts.srv.HTTPHandler())
	defer srv.Close()
	c := ts.client(t)
	pushRun(t, c, "jobs", "p", 0, 20)
	res := mustPop(t, c, protocol.PopArgs{Queue: "jobs", Partition: "p", Group: "g", Batch: 10})
	if len(res.Messages) != 10 {
		t.Fatalf("pop: %d messages", len(res.Messages))
	}
	// Offsets 0..3 and 5 acked: the cursor stops at 4, 5 waits under the lease.
	var acks []protocol.AckItem
	for _, m := range res.Messages {
		if m.Offset <= 3 || m.Offset == 5 {
			acks = append(acks, queenside.Completed(m))
		}
	}
	mustAck(t, c, acks...)
	cursorRow := func() string {
		var row string
		if err := ts.pool.QueryRow(testContext(t), `SELECT string_agg(c::text, ';' ORDER BY c.group_id)
			FROM queenside.cursors c`).Scan(&row); err != nil {
			t.Fatal(err)
		}
		return row
	}
	before := cursorRow()

	page := mustGet(t, srv, browsePath("jobs", "p", "from=0&group=g"))
	g := page["group"].(map[string]any)
	if g["group"] != "g" || num(g["cursor"]) != 4 || g["leased"] != true || num(g["leaseFrom"]) != 0 ||
		num(g["leaseTo"]) != 9 || g["leaseExpiresAt"] == nil || !reflect.DeepEqual(g["acked"], []any{float64(5)}) {
		t.Fatalf("group: %v", g)
	}
	var states []string
	for _, m := range page["messages"].([]any) {
		states = append(states, m.(map[string]any)["state"].(string))
	}
	want := []string{"consumed", "consumed", "consumed", "consumed", "leased", "acked", "leased", "leased", "leased", "leased"}
	for range 10 {
		want = append(want, "pending")
	}
	if !reflect.DeepEqual(states, want) {
		t.Fatalf("states: %v", states)
	}
	// Every way of reading, then the cursors as they were.
	mustGet(t, srv, browsePath("jobs", "p", "group=g"))
	mustGet(t, srv, browsePath("jobs", "p", "transactionId=tx-7&group=g"))
	mustGet(t, srv, browsePath("jobs", "p", "at=2000-01-01T00:00:00Z&group=g"))
	one := mustGet(t, srv, browsePath("jobs", "p", "")+"/4?group=g")
	if one["state"] != "leased" {
		t.Fatalf("offset 4: %v", one)
	}
	if after := cursorRow(); after != before {
		t.Fatalf("browsing changed the cursors:\nbefore %s\nafter  %s", before, after)
	}
	var rest []protocol.AckItem
	for _, m := range res.Messages {
		if m.Offset == 4 || m.Offset > 5 {
			rest = append(rest, queenside.Completed(m))
		}
	}
	for _, r := range mustAck(t, c, rest...).Results {
		if !r.Success {
			t.Fatalf("the lease no longer acks after browsing: %+v", r)
		}
	}
	page = mustGet(t, srv, browsePath("jobs", "p", "from=0&limit=12&group=g"))
	if g := page["group"].(map[string]any); num(g["cursor"]) != 10 || g["leased"] != false {
		t.Fatalf("after the acks: %v", g)
	}
}

// A transaction id is found through the dedup table inside its window, by
// reading the newest messages beyond it, and not at all otherwise.
func TestMessageBrowserFindsATransactionID(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	srv := httptest.NewServer(ts.srv.HTTPHandler())
	defer srv.Close()
	c := ts.client(t)
	pushRun(t, c, "orders", "p", 0, 30)
	pushRun(t, c, "orders", "other", 0, 30) // the same ids in another partition

	page := mustGet(t, srv, browsePath("orders", "p", "transactionId=tx-12&limit=5"))
	match := page["match"].(map[string]any)
	if match["found"] != true || num(match["offset"]) != 12 || match["searchedBy"] != "dedup" {
		t.Fatalf("tx-12: %v", page)
	}
	if got := pageOffsets(page); !reflect.DeepEqual(got, offsetSpan(10, 14)) {
		t.Fatalf("the match's page: %v", got)
	}
	// Beyond the dedup window, as if its rows had been purged: the newest
	// messages are read instead.
	if _, err := ts.pool.Exec(testContext(t), "DELETE FROM queenside.dedup"); err != nil {
		t.Fatal(err)
	}
	page = mustGet(t, srv, browsePath("orders", "p", "transactionId=tx-1"))
	match = page["match"].(map[string]any)
	if match["found"] != true || num(match["offset"]) != 1 || match["searchedBy"] != "recent" || num(match["searchedMessages"]) != 30 {
		t.Fatalf("tx-1 beyond the window: %v", page)
	}
	if got := pageOffsets(page); got[0] != 0 || got[1] != 1 {
		t.Fatalf("the match's page: %v", got)
	}
	page = mustGet(t, srv, browsePath("orders", "p", "transactionId=tx-999"))
	match = page["match"].(map[string]any)
	if match["found"] != false || match["offset"] != nil || len(page["messages"].([]any)) != 0 ||
		!strings.Contains(page["note"].(string), "nor among the newest 30 messages") {
		t.Fatalf("tx-999: %v", page)
	}
}

// Payloads: msgpack values as JSON, JSON text as JSON, binary as hex and
// base64, a long one cut in its preview, a large one read only when
// opened; sealed ones opened with the key, and named by it without.
func TestMessageBrowserShowsPayloads(t *testing.T) {
	path := keyFile(t, filepath.Join(t.TempDir(), "keys"), "k1")
	keys, err := crypt.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	ts := startSidecar(t, "", Options{Keys: keys})
	srv := httptest.NewServer(ts.srv.HTTPHandler())
	defer srv.Close()
	c := ts.client(t)
	raw := func(v any) msgpack.RawMessage {
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	long := strings.Repeat("é", 1000)
	large := strings.Repeat("z", 70<<10)
	mustPush(t, c,
		protocol.PushItem{Queue: "kinds", Partition: "p", Payload: raw([]any{1, "two", true, nil})},
		protocol.PushItem{Queue: "kinds", Partition: "p", Payload: raw(`{"order": 7, "items": ["a"]}`)},
		protocol.PushItem{Queue: "kinds", Partition: "p", Payload: raw([]byte{0xde, 0xad, 0xbe, 0xef})},
		protocol.PushItem{Queue: "kinds", Partition: "p", Payload: raw(long)},
		protocol.PushItem{Queue: "kinds", Partition: "p", Payload: raw(large)},
		protocol.PushItem{Queue: "kinds", Partition: "p", Payload: raw("plain")},
	)
	page := mustGet(t, srv, browsePath("kinds", "p", "from=0"))
	pl := func(i int) map[string]any {
		return page["messages"].([]any)[i].(map[string]any)["payload"].(map[string]any)
	}
	if p := pl(0); p["kind"] != "msgpack" || p["preview"] != `[1,"two",true,null]` {
		t.Fatalf("array: %v", p)
	}
	if p := pl(1); p["kind"] != "json" || p["preview"] != `{"order":7,"items":["a"]}` {
		t.Fatalf("JSON text: %v", p)
	}
	if p := pl(2); p["kind"] != "bytes" || p["preview"] != "deadbeef" {
		t.Fatalf("bytes: %v", p)
	}
	if p := pl(3); p["kind"] != "msgpack" || p["truncated"] != true || len(p["preview"].(string)) > previewChars ||
		!strings.HasPrefix(p["preview"].(string), `"éé`) {
		t.Fatalf("long: %v", p)
	}
	if p := pl(4); p["kind"] != "large" || p["preview"] != "" || !strings.Contains(p["note"].(string), "open the message") {
		t.Fatalf("large: %v", p)
	}
	if p := pl(5); p["kind"] != "msgpack" || p["preview"] != `"plain"` {
		t.Fatalf("a string: %v", p)
	}
	whole := func(off int) map[string]any {
		return mustGet(t, srv, browsePath("kinds", "p", "")+fmt.Sprintf("/%d", off))["payload"].(map[string]any)
	}
	if p := whole(1); !reflect.DeepEqual(p["value"], map[string]any{"order": float64(7), "items": []any{"a"}}) {
		t.Fatalf("JSON text, whole: %v", p)
	}
	if p := whole(2); p["base64"] != "3q2+7w==" {
		t.Fatalf("bytes, whole: %v", p)
	}
	if p := whole(3); p["value"] != long {
		t.Fatalf("long, whole: %v", p)
	}
	if p := whole(4); p["kind"] != "msgpack" || p["value"] != large {
		t.Fatalf("large, whole: kind %v, %d chars", p["kind"], len(fmt.Sprint(p["value"])))
	}

	// Sealed: this sidecar holds k1 and shows the plaintext; another on the
	// same database without keys names the key.
	encrypted(t, c, "sec", nil)
	mustPush(t, c, secretItem(t, "sec", "p", "a"))
	page = mustGet(t, srv, browsePath("sec", "p", ""))
	if p := pl(0); p["sealedWith"] != "k1" || p["kind"] != "msgpack" || !strings.Contains(p["preview"].(string), secretMarker) {
		t.Fatalf("sealed, with the key: %v", p)
	}
	keyless := startSidecar(t, ts.dbURL, Options{})
	other := httptest.NewServer(keyless.srv.HTTPHandler())
	defer other.Close()
	page = mustGet(t, other, browsePath("sec", "p", ""))
	if p := pl(0); p["kind"] != "sealed" || p["sealedWith"] != "k1" || p["note"] != "sealed with key k1, not held by this sidecar" ||
		strings.Contains(fmt.Sprint(page), secretMarker) {
		t.Fatalf("sealed, without the key: %v", p)
	}
	if p := mustGet(t, other, browsePath("sec", "p", "")+"/0")["payload"].(map[string]any); p["kind"] != "sealed" || p["value"] != nil {
		t.Fatalf("sealed, opened without the key: %v", p)
	}
}

// A payload nested deeper than ShownNesting (stored through the SQL API,
// which takes any bytes) is shown as bytes with a note, on a message's
// page and in the dead letters' list, instead of being decoded: a million
// levels took the dashboard minutes and its stack before.
func TestDeepPayloadsAreShownAsBytes(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	srv := httptest.NewServer(ts.srv.HTTPHandler())
	defer srv.Close()
	c := ts.client(t)
	send := func(queue string, payload []byte) {
		t.Helper()
		var status string
		if err := ts.pool.QueryRow(testContext(t), `SELECT status FROM queenside.send($1, $2, 'p')`, queue, payload).Scan(&status); err != nil || status != "queued" {
			t.Fatalf("send: %s %v", status, err)
		}
	}
	send("deep", nested(1_000_000))
	send("deep", nested(ShownNesting-1)) // within the bound: decoded
	p := mustGet(t, srv, browsePath("deep", "p", "")+"/0")["payload"].(map[string]any)
	if p["kind"] != "bytes" || p["note"] != tooDeepNote || !strings.HasPrefix(p["preview"].(string), "919191") || p["base64"] == nil {
		t.Fatalf("a million levels: %v", p)
	}
	p = mustGet(t, srv, browsePath("deep", "p", "")+"/1")["payload"].(map[string]any)
	if p["kind"] != "msgpack" || !strings.HasPrefix(p["preview"].(string), "[[[[") {
		t.Fatalf("%d levels: %v", ShownNesting-1, p)
	}
	page := mustGet(t, srv, browsePath("deep", "p", "from=0"))
	if n := len(page["messages"].([]any)); n != 2 {
		t.Fatalf("the page lists %d messages, want 2", n)
	}

	// A dead letter: its payload stands as the note, its size beside it.
	configure(t, c, "dl", func(o *protocol.QueueOptions) { o.RetryLimit = 0 })
	mustPop(t, c, protocol.PopArgs{Queue: "dl", Group: "g"})
	deep := nested(20_000)
	send("dl", deep)
	res := mustPop(t, c, protocol.PopArgs{Queue: "dl", Group: "g"})
	if len(res.Messages) != 1 {
		t.Fatalf("popped %d messages", len(res.Messages))
	}
	mustAck(t, c, queenside.Failed(res.Messages[0], "too deep for its consumer"))
	entries := mustGet(t, srv, "/api/dlq?queue=dl")["entries"].([]any)
	if len(entries) != 1 {
		t.Fatalf("%d dead letters", len(entries))
	}
	if e := entries[0].(map[string]any); e["payload"] != tooDeepNote || num(e["payloadBytes"]) != int64(len(deep)) {
		t.Fatalf("the dead letter: payload %v, %v bytes", e["payload"], e["payloadBytes"])
	}
}
