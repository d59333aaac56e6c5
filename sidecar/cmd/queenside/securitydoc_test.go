package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// walkStep is one command of a walk-through and the lines it prints, as
// the page shows them.
type walkStep struct {
	command string
	want    []string
}

// walkThrough reads the console blocks of section heading of a page:
// each "$ " line is a command, and the lines below it, up to the next,
// what it prints.
func walkThrough(t *testing.T, page, heading string) []walkStep {
	t.Helper()
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## "+heading+"\n")
	if !ok {
		t.Fatalf("%s has no section %q", page, heading)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var steps []walkStep
	inBlock := false
	for _, line := range strings.Split(section, "\n") {
		switch {
		case line == "```console":
			inBlock = true
		case line == "```":
			inBlock = false
		case !inBlock:
		case strings.HasPrefix(line, "$ "):
			steps = append(steps, walkStep{command: strings.TrimPrefix(line, "$ ")})
		case len(steps) > 0:
			steps[len(steps)-1].want = append(steps[len(steps)-1].want, line)
		}
	}
	if len(steps) == 0 {
		t.Fatalf("%s, %q: no console block", page, heading)
	}
	return steps
}

// printedAs makes a regular expression of a line as a page shows it: a
// run of spaces stands for any, "…" for anything.
func printedAs(line string) *regexp.Regexp {
	var re strings.Builder
	re.WriteString("^")
	for i, part := range strings.Split(strings.Join(strings.Fields(line), " "), "…") {
		if i > 0 {
			re.WriteString(".*")
		}
		re.WriteString(strings.ReplaceAll(regexp.QuoteMeta(strings.TrimSpace(part)), " ", `\s+`))
	}
	re.WriteString("$")
	return regexp.MustCompile(re.String())
}

// The walk-through of docs/SECURITY.md runs as printed: two roles, their
// grants, a refusal by a sidecar and by PostgreSQL, and a grant taking
// effect on a running sidecar. Its commands run in one shell, from a
// directory where `make run` runs, with $DB the URL it prints; each
// prints the lines the page shows, in order (other lines may come
// between).
func TestTheSecurityWalkThroughRunsAsPrinted(t *testing.T) {
	if _, err := exec.LookPath("psql"); err != nil {
		t.Fatalf("the walk-through needs psql: %v", err)
	}
	bin := buildCLI(t)
	dir := shortDir(t)
	dev := startDev(t, bin, dir)
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bin, filepath.Join(dir, "bin", "queenside")); err != nil {
		t.Fatal(err)
	}
	steps := walkThrough(t, "../../../docs/SECURITY.md", "Walk-through")

	// One shell runs every command, each output after a marker line; the
	// sidecar the page starts in the background is stopped at the end.
	var script strings.Builder
	script.WriteString("trap 'kill $(jobs -p) 2>/dev/null; wait' EXIT\n")
	for i, s := range steps {
		fmt.Fprintf(&script, "echo '@@step %d'\n%s 2>&1\n", i, s.command)
	}
	cmd := exec.Command("bash", "-c", script.String())
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "DB="+devDatabaseURL(t, dev), "QUEENSIDE_SOCKET=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the walk-through's shell: %v\n%s", err, out)
	}
	printed := strings.Split(string(out), "\n")
	outputs := make([][]string, len(steps))
	step := -1
	for _, line := range printed {
		var n int
		if _, err := fmt.Sscanf(line, "@@step %d", &n); err == nil {
			step = n
			continue
		}
		if step >= 0 && strings.TrimSpace(line) != "" {
			outputs[step] = append(outputs[step], line)
		}
	}
	for i, s := range steps {
		got := outputs[i]
		at := 0
		for _, want := range s.want {
			re := printedAs(want)
			for at < len(got) && !re.MatchString(strings.Join(strings.Fields(got[at]), " ")) {
				at++
			}
			if at == len(got) {
				t.Errorf("$ %s\nprinted:\n%s\nwithout the line the page shows: %s", s.command, strings.Join(outputs[i], "\n"), want)
				break
			}
			at++
		}
	}
}
