package citusrules

import (
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// known is every place the live SQL breaks a rule today, with the form it
// takes on Citus. It only shrinks: a rule newly broken fails the test, and
// so does an entry whose place keeps the rule now (take it out).
var known = map[string]string{
	"current.sql: ack R10":     "runs on the coordinator (ack_call is not routed), where every sidecar listens",
	"current.sql: ack_call R8": "kept on one PostgreSQL; schema.Distribute resets it on Citus",
	"current.sql: pop R2":      "one PostgreSQL only: on Citus the sidecar names the partition",
	"current.sql: pop_from R2": "one PostgreSQL only (p_pids NULL): on Citus the sidecar names one shard's candidates",
	"current.sql: pop_from R8": "kept on one PostgreSQL; schema.Distribute resets it on Citus",
	"current.sql: push R8":     "kept on one PostgreSQL; schema.Distribute resets it on Citus",
	"current.sql: push R10":    "only unrouted (p_route NULL, one PostgreSQL): a routed call's sidecar notifies on the coordinator",
	"current.sql: seek R10":    "runs on the coordinator (not routed), where every sidecar listens",
}

func key(v Violation) string {
	number, _, _ := strings.Cut(string(v.Rule), " ")
	return v.Place + " " + number
}

// liveViolations checks schema/current.sql and the store's SQL.
func liveViolations(t *testing.T) []Violation {
	t.Helper()
	vs, err := CheckSchemaFile(filepath.Join("..", "current.sql"))
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join("..", "..", "sidecar", "store", "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("the store's sources: %v (%d files)", err, len(files))
	}
	var sources []string
	for _, f := range files {
		if !strings.HasSuffix(f, "_test.go") {
			sources = append(sources, f)
		}
	}
	gs, err := CheckGoFiles(sources)
	if err != nil {
		t.Fatal(err)
	}
	return append(vs, gs...)
}

func TestTheLiveSQLBreaksNoRuleNotKnown(t *testing.T) {
	found := map[string]bool{}
	for _, v := range liveViolations(t) {
		found[key(v)] = true
		if _, ok := known[key(v)]; !ok {
			t.Errorf("%s breaks %s (SCALING.md, \"The statement rules\"):\n    %s", v.Place, v.Rule, v.Text)
		}
	}
	var kept []string
	for k := range known {
		if !found[k] {
			kept = append(kept, k)
		}
	}
	sort.Strings(kept)
	for _, k := range kept {
		t.Errorf("%s keeps its rule now: take it out of known", k)
	}
}
