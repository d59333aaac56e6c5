package sidecar

import (
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

const (
	testReadToken  = "0123456789abcdef-reader"
	testAliceToken = "0123456789abcdef-alice"
)

func TestReadTokensCloseReadsAndOnlyAdminTokensWrite(t *testing.T) {
	var logged lockedLog // process_test.go
	tokens := Tokens{
		Admin: []Token{{Name: "admin", Secret: testAdminToken}, {Name: "alice", Secret: testAliceToken}},
		Read:  []Token{{Name: "grafana", Secret: testReadToken}},
	}
	ts := startSidecar(t, "", Options{Tokens: tokens,
		Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: &logged})})
	srv := httptest.NewServer(ts.srv.HTTPHandler())
	defer srv.Close()
	c := ts.client(t)
	mustPush(t, c, item(t, "q", "p", "", "x"))

	// The page learns that reads need a token; info and auth stay open.
	if code, info := apiCall(t, srv, "GET", "/api/info", "", nil); code != 200 || info["reads"] != "token" || info["writes"] != "token" {
		t.Fatalf("/api/info: %d %v", code, info)
	}
	for _, path := range []string{"/api/queues", "/api/queues/q", "/api/dlq", "/api/spool", "/api/cluster", "/api/nothing-here"} {
		for _, token := range []string{"", "not-a-token-of-this-sidecar"} {
			if code, out := apiCall(t, srv, "GET", path, token, nil); code != 401 || errCode(out) != "unauthorized" {
				t.Fatalf("GET %s with token %q: %d %v", path, token, code, out)
			}
		}
		for _, token := range []string{testReadToken, testAdminToken, testAliceToken} {
			if code, out := apiCall(t, srv, "GET", path, token, nil); code == 401 || code == 403 {
				t.Fatalf("GET %s with token %q: %d %v", path, token, code, out)
			}
		}
	}
	if code, out := apiCall(t, srv, "GET", "/api/queues", testReadToken, nil); code != 200 || len(out["queues"].([]any)) != 1 {
		t.Fatalf("/api/queues with the read token: %d %v", code, out)
	}
	// The probes and the page itself stay open.
	for _, path := range []string{"/live", "/metrics", "/", "/app.js"} {
		resp, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d", path, resp.StatusCode)
		}
	}

	// /api/auth names the token and its role.
	if code, out := apiCall(t, srv, "GET", "/api/auth", testReadToken, nil); code != 200 || out["role"] != "read" || out["name"] != "grafana" {
		t.Fatalf("/api/auth with the read token: %d %v", code, out)
	}
	if code, out := apiCall(t, srv, "GET", "/api/auth", testAliceToken, nil); code != 200 || out["role"] != "admin" || out["name"] != "alice" {
		t.Fatalf("/api/auth with alice's token: %d %v", code, out)
	}
	if code, out := apiCall(t, srv, "GET", "/api/auth", "not-a-token-of-this-sidecar", nil); code != 403 || errCode(out) != "forbidden" {
		t.Fatalf("/api/auth with a wrong token: %d %v", code, out)
	}

	// A read token may not write, and its refusal is logged with its name.
	pause := map[string]any{"paused": true}
	if code, out := apiCall(t, srv, "POST", "/api/queues/q/pause", testReadToken, pause); code != 403 || errCode(out) != "forbidden" || !strings.Contains(out["error"].(map[string]any)["message"].(string), "grafana") {
		t.Fatalf("a write with the read token: %d %v", code, out)
	}
	if _, q := apiCall(t, srv, "GET", "/api/queues/q", testReadToken, nil); q["options"].(map[string]any)["consumptionPaused"] != false {
		t.Fatal("a refused write paused the queue")
	}
	if log := logged.String(); !strings.Contains(log, "dashboard write refused") || !strings.Contains(log, "token=grafana") {
		t.Fatalf("the refused write is not logged with its token:\n%s", log)
	}

	// An admin token writes, and the write is logged: who, what, how it ended.
	if code, out := apiCall(t, srv, "POST", "/api/queues/q/pause", testAliceToken, pause); code != 200 {
		t.Fatalf("a write with alice's token: %d %v", code, out)
	}
	log := logged.String()
	line := ""
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "dashboard write:") {
			line = l
		}
	}
	for _, want := range []string{"token=alice", "method=POST", "path=/api/queues/q/pause", `body="{\"paused\":true}"`, "status=200"} {
		if !strings.Contains(line, want) {
			t.Fatalf("the write's log line lacks %s: %q\n%s", want, line, log)
		}
	}
	if strings.Contains(log, testAliceToken) || strings.Contains(log, testReadToken) {
		t.Fatal("a token was logged")
	}
}

func TestReadsAreOpenWithoutAReadToken(t *testing.T) {
	ts := startSidecar(t, "", Options{Tokens: AdminTokens(testAdminToken)})
	srv := httptest.NewServer(ts.srv.HTTPHandler())
	defer srv.Close()
	if code, info := apiCall(t, srv, "GET", "/api/info", "", nil); code != 200 || info["reads"] != "open" {
		t.Fatalf("/api/info: %d %v", code, info)
	}
	if code, out := apiCall(t, srv, "GET", "/api/queues", "", nil); code != 200 {
		t.Fatalf("/api/queues without a token: %d %v", code, out)
	}
}

func TestTokenFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := dir + "/" + name
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	// One bare token is named after its file's role.
	tok, err := readTokens(write("bare", "  "+testAdminToken+"\n"), "")
	if err != nil || len(tok.Admin) != 1 || tok.Admin[0] != (Token{Name: "admin", Secret: testAdminToken}) || tok.Read != nil {
		t.Fatalf("%+v %v", tok, err)
	}
	// Named tokens, comments and blank lines.
	tok, err = readTokens(write("named", "# operators\nalice:"+testAliceToken+"\n\nbob : "+testAdminToken+"\n"), write("read", testReadToken))
	if err != nil || len(tok.Admin) != 2 || tok.Admin[1] != (Token{Name: "bob", Secret: testAdminToken}) || tok.Read[0] != (Token{Name: "read", Secret: testReadToken}) {
		t.Fatalf("%+v %v", tok, err)
	}
	for name, c := range map[string]struct{ admin, read, want string }{
		"short":     {write("short", "abc\n"), "", "at least 16"},
		"missing":   {dir + "/missing", "", "no such file"},
		"empty":     {write("empty", "# nothing\n"), "", "no token"},
		"bad name":  {write("badname", "a b:"+testAdminToken), "", "the name"},
		"two bare":  {write("twobare", testAdminToken+"\n"+testAliceToken), "", "second token named \"admin\""},
		"both":      {write("both", testAdminToken), write("both-read", "r:"+testAdminToken), "also an admin token"},
		"read only": {"", write("short-read", "r:short"), "--read-token-file"},
	} {
		if _, err := readTokens(c.admin, c.read); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", name, err, c.want)
		}
	}
	if tok, err := readTokens("", ""); err != nil || tok.Admin != nil || tok.Read != nil {
		t.Fatalf("no file: %+v %v", tok, err)
	}
}

func TestTokenFileScopes(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := dir + "/" + name
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	admin := write("admin", "# operators\n"+
		"alice:"+testAliceToken+"\n"+
		"billing-ops : "+testAdminToken+"  queues=billing.*,payments,billing.* rights=manage,read\n"+
		"viewer:"+testReadToken+"-v rights=read\n"+
		"team:"+testReadToken+"-t queues=a:b\n")
	tok, err := readTokens(admin, write("read", testReadToken+" queues=billing.*"))
	if err != nil {
		t.Fatal(err)
	}
	scope := func(tk Token) string {
		if tk.Scope == nil {
			return "none"
		}
		return tk.Scope.String()
	}
	for i, want := range []string{"none", "queues=billing.*,payments rights=read,manage", "queues=* rights=read", "queues=a:b rights=read,manage"} {
		if got := scope(tok.Admin[i]); got != want {
			t.Errorf("admin token %d (%s): scope %s, want %s", i, tok.Admin[i].Name, got, want)
		}
	}
	if tok.Admin[1].Name != "billing-ops" || tok.Admin[1].Secret != testAdminToken {
		t.Errorf("the scoped token: %+v", tok.Admin[1])
	}
	if r := tok.Read[0]; r.Name != "read" || r.Secret != testReadToken || scope(r) != "queues=billing.* rights=read" {
		t.Errorf("a bare read token with a scope: %+v %s", r, scope(r))
	}

	// The one rule of patterns, as queenside.matches has it.
	for _, c := range []struct {
		pattern, name string
		want          bool
	}{
		{"*", "anything", true}, {"billing.*", "billing.invoices", true}, {"billing.*", "billing.", true},
		{"billing.*", "billing", false}, {"billing", "billing", true}, {"billing", "billing.x", false}, {"bill*", "billing", true},
	} {
		if got := queuePatternMatches(c.pattern, c.name); got != c.want {
			t.Errorf("queuePatternMatches(%q, %q) = %v", c.pattern, c.name, got)
		}
	}

	// Errors in a scope name the file and the line.
	for name, c := range map[string]struct{ admin, read, want string }{
		"unknown key":   {write("k", "# x\na:"+testAdminToken+" queue=billing.*\n"), "", "k line 2: after the token, \"queue=billing.*\""},
		"space":         {write("sp", "a:0123456789 abcdef\n"), "", "sp line 1: the token is 10 characters long"},
		"space in":      {write("sp2", "a:"+testAdminToken+" more\n"), "", "sp2 line 1: after the token, \"more\""},
		"twice":         {write("tw", "a:"+testAdminToken+" rights=read rights=manage\n"), "", "tw line 1: rights= is given twice"},
		"empty":         {write("em", "a:"+testAdminToken+" queues=\n"), "", "em line 1: queues= is empty"},
		"empty pattern": {write("ep", "a:"+testAdminToken+" queues=a,,b\n"), "", "ep line 1: queues=: \"\""},
		"inner star":    {write("st", "a:"+testAdminToken+" queues=bil*ing\n"), "", "st line 1: queues=: \"bil*ing\": want a queue name, or a prefix ending in *"},
		"bad character": {write("ch", "a:"+testAdminToken+" queues=bill/ing.*\n"), "", "ch line 1: queues=: \"bill/ing.*\""},
		"unknown right": {write("ur", "a:"+testAdminToken+" rights=write\n"), "", "ur line 1: rights=write: \"write\" is not a right"},
		"produce":       {write("pr", "a:"+testAdminToken+" rights=read,produce\n"), "", "pr line 1: rights=produce: the dashboard has no route that produces"},
		"consume":       {write("co", "a:"+testAdminToken+" rights=consume\n"), "", "co line 1: rights=consume: the dashboard has no route that consumes"},
		"read manages":  {"", write("rm", "r:"+testReadToken+" rights=read,manage\n"), "--read-token-file " + dir + "/rm line 1: rights=read,manage: a read token may only read"},
	} {
		if _, err := readTokens(c.admin, c.read); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", name, err, c.want)
		}
	}
}
