package protocol_test

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/protocol/internal/clientgen"
)

// The clients' tables of codes and options are generated from this
// package: any difference means someone edited a generated file, or
// changed codes.go or the queue options without regenerating.
func TestGeneratedClientFiles(t *testing.T) {
	files, err := clientgen.Files("..")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		got, err := os.ReadFile(filepath.Join("..", f.Path))
		if err != nil {
			t.Errorf("%s: %v (run %s)", f.Path, err, clientgen.Command)
			continue
		}
		if !bytes.Equal(got, f.Content) {
			t.Errorf("%s differs from what %s writes now (%s); run it, and edit codes.go or op_queue.go, never the generated file",
				f.Path, clientgen.Command, firstDifference(got, f.Content))
		}
	}
}

func firstDifference(got, want []byte) string {
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return "line " + strconv.Itoa(i+1) + ": has " + quote(gl) + ", want " + quote(wl)
		}
	}
	return "same lines"
}

func quote(s string) string { return "`" + s + "`" }

// PROTOCOL.md's section 5 is prose with a table: its codes, in order, and
// their retryable flags must be Codes() and Retryable().
func TestProtocolMDCodesTable(t *testing.T) {
	doc, err := os.ReadFile("PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	start := strings.Index(text, "\n## 5. Error codes")
	if start < 0 {
		t.Fatal("PROTOCOL.md has no section \"## 5. Error codes\"")
	}
	section := text[start+1:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| (yes|no) \\|")
	var got []string
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		got = append(got, m[1]+" "+m[2])
	}
	var want []string
	for _, c := range protocol.Codes() {
		flag := "no"
		if c.Retryable() {
			flag = "yes"
		}
		want = append(want, string(c)+" "+flag)
	}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Fatalf("PROTOCOL.md section 5 lists\n  %s\nprotocol/codes.go has\n  %s", strings.Join(got, ", "), strings.Join(want, ", "))
	}
}

// Every option the generator reads has a wire name, and a range that holds
// its default.
func TestOptionSpecs(t *testing.T) {
	specs := protocol.OptionSpecs()
	if len(specs) < 8 {
		t.Fatalf("%d options: %+v", len(specs), specs)
	}
	seen := map[string]bool{}
	for _, s := range specs {
		if s.Name == "" || seen[s.Name] || !s.HasRange() || s.Default < s.Min || s.Default > s.Max {
			t.Errorf("option %+v", s)
		}
		seen[s.Name] = true
	}
	d := protocol.DefaultQueueOptions()
	if specs[0].Name != "leaseSeconds" || specs[0].Default != int64(d.LeaseSeconds) || specs[0].Min != 1 || specs[0].Max != 86400 {
		t.Errorf("leaseSeconds read as %+v", specs[0])
	}
}
