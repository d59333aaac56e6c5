package queenside_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/queenside/queenside/sidecar"
	"github.com/queenside/queenside/sidecar/pgtest"
)

// The placeholders of the quick start's commands: the checkout, and the
// socket `make run` serves in it.
const (
	checkoutPlaceholder = "/path/to/queenside"
	socketPlaceholder   = checkoutPlaceholder + "/.queenside/queenside.sock"
)

// quickStart returns the commands and the program of README.md's quick
// start, as printed.
func quickStart(t *testing.T) (commands, program string) {
	return readmeProgram(t, "Quick start")
}

// readmeProgram returns the first sh block (the commands) and the first
// go block (a complete program) of README.md's section under heading,
// as printed.
func readmeProgram(t *testing.T, heading string) (commands, program string) {
	t.Helper()
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	section := string(readme)
	start := strings.Index(section, "\n## "+heading+"\n")
	if start < 0 {
		t.Fatalf("README.md has no %s section", heading)
	}
	section = section[start+1:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	blocks := regexp.MustCompile("(?s)```(sh|go)\n(.*?)```").FindAllStringSubmatch(section, -1)
	for _, b := range blocks {
		switch {
		case b[1] == "sh" && commands == "":
			commands = b[2]
		case b[1] == "go" && program == "":
			program = b[2]
		}
	}
	if commands == "" || !strings.Contains(program, "package main") {
		t.Fatalf("%s: the commands (%q) or complete program (%q) are missing", heading, commands, program)
	}
	return commands, program
}

// inNewModule writes program as main.go in a temporary directory and
// runs there every command but the last, with the placeholders pointing
// at this checkout and at socket. It returns the directory, the last
// command and the environment to run it in: the modules come from the
// local module cache, GOPROXY and GOSUMDB off, as the test runs without a
// network.
func inNewModule(t *testing.T, commands, program, socket string, env ...string) (dir, last string, runEnv []string) {
	t.Helper()
	checkout, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(commands, socketPlaceholder) || !strings.Contains(commands, "-replace github.com/queenside/queenside="+checkoutPlaceholder+"\n") {
		t.Fatalf("the commands name neither the checkout nor the socket as this test expects:\n%s", commands)
	}
	commands = strings.ReplaceAll(commands, socketPlaceholder, socket)
	commands = strings.ReplaceAll(commands, checkoutPlaceholder, checkout)

	dir = t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(program), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "QUEENSIDE_SOCKET=") && !strings.HasPrefix(kv, "DATABASE_URL=") {
			runEnv = append(runEnv, kv)
		}
	}
	runEnv = append(runEnv, "GOPROXY=off", "GOSUMDB=off", "GOWORK=off", "GOFLAGS=")
	runEnv = append(runEnv, env...)

	var lines []string
	for _, l := range strings.Split(commands, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	for _, l := range lines[:len(lines)-1] {
		cmd := exec.Command("sh", "-ec", l)
		cmd.Dir, cmd.Env = dir, runEnv
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", l, err, out)
		}
	}
	return dir, lines[len(lines)-1], runEnv
}

// The quick start, as printed, in a new module in a temporary directory:
// its commands are run with the placeholders pointing at this checkout
// and at a sidecar served here; the last one, the program, runs until a
// SIGINT to its process group, as Ctrl-C in a terminal sends, and must
// then stop cleanly. The modules come from the local module cache:
// GOPROXY and GOSUMDB are off, as the test runs without a network.
func TestReadmeQuickStartRunsAsPrinted(t *testing.T) {
	commands, program := quickStart(t)
	socket := startSidecar(t)
	dir, lastLine, env := inNewModule(t, commands, program, socket)

	// The last command runs the program: VAR=value... command args...
	last := strings.Fields(lastLine)
	runEnv := env
	for len(last) > 0 && strings.Contains(last[0], "=") {
		runEnv = append(runEnv, last[0])
		last = last[1:]
	}
	cmd := exec.Command(last[0], last[1:]...)
	cmd.Dir, cmd.Env = dir, runEnv
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr logBuffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) //nolint:errcheck // when the test failed midway
	printed := make(chan string)
	go func() {
		defer close(printed)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			printed <- sc.Text()
		}
	}()

	want := []string{
		"pushed A1: queued", "pushed B2: queued", "pushed C3: queued",
		"order A1 x1 (offset 0)", "order B2 x2 (offset 1)", "order C3 x3 (offset 2)",
	}
	var got []string
	timeout := time.After(5 * time.Minute) // the program is compiled first
	for len(got) < len(want) {
		select {
		case l, ok := <-printed:
			if !ok {
				t.Fatalf("the program ended after printing %q\n%s", got, stderr.String())
			}
			got = append(got, l)
		case <-timeout:
			t.Fatalf("the program printed %q, then nothing\n%s", got, stderr.String())
		}
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("the program printed\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// Ctrl-C: a SIGINT to the foreground process group.
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	var rest []string
	for l := range printed {
		rest = append(rest, l)
	}
	// go run itself exits 1 when it was sent a SIGINT, whatever the
	// program's status, silently; it reports a program that failed or was
	// killed ("exit status 1", "signal: interrupt") on stderr, where the
	// program would also log its error.
	err = cmd.Wait()
	if err != nil && last[0] != "go" || stderr.String() != "" {
		t.Fatalf("after Ctrl-C the program ended with %v, printing %q\nstderr: %s", err, rest, stderr.String())
	}
	if strings.Join(rest, "\n") != "stopped: 3 completed, 0 failed" {
		t.Fatalf("after Ctrl-C the program printed %q\n%s", rest, stderr.String())
	}

	// Everything was acked; nothing is left leased.
	c := dial(t, socket)
	st, err := c.Stats(context.Background(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	if g := st.Partitions[0].Groups[0]; g.Group != "billing" || g.Cursor != 3 || g.Leased {
		t.Fatalf("after the quick start: %+v", g)
	}
}

// The outbox and the inbox, as printed in "Inside your own transaction":
// its commands in a new module, against a sidecar and its database; the
// program run for two orders, then for the first again, whose INSERT
// fails and which pushes nothing.
func TestReadmeInsideYourOwnTransactionRunsAsPrinted(t *testing.T) {
	commands, program := readmeProgram(t, "Inside your own transaction")
	dbURL := pgtest.NewDatabase(t)
	socket := serveOn(t, dbURL, sidecar.Options{})
	dir, last, env := inNewModule(t, commands, program, socket, "DATABASE_URL="+dbURL)
	if !strings.HasSuffix(last, " 1001") {
		t.Fatalf("the last command does not end with the order 1001: %s", last)
	}
	run := func(order string) (string, error) {
		t.Helper()
		line := strings.TrimSuffix(last, "1001") + order
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // compiled first
		defer cancel()
		cmd := exec.CommandContext(ctx, "sh", "-ec", line)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run("1001"); err != nil || out != "order 1001: queued at offset 0 of customer-42\nbilled order 1001: 250\n" {
		t.Fatalf("order 1001: %v\n%s", err, out)
	}
	if out, err := run("1002"); err != nil || out != "order 1002: queued at offset 1 of customer-42\nbilled order 1002: 250\n" {
		t.Fatalf("order 1002: %v\n%s", err, out)
	}
	if out, err := run("1001"); err == nil || !strings.Contains(out, "duplicate key") || strings.Contains(out, "queued") {
		t.Fatalf("order 1001 again: %v\n%s", err, out)
	}
	c := dial(t, socket)
	st, err := c.Stats(context.Background(), "order-created")
	if err != nil {
		t.Fatal(err)
	}
	if p := st.Partitions[0]; p.HeadOffset != 2 || p.Groups[0].Cursor != 2 {
		t.Fatalf("after the three runs: %+v", p)
	}
}

// What the consume loop does by default is said in the same words in the
// three clients' READMEs, and with the defaults cases.json holds.
func TestReadmesSayTheConsumeDefaultsAlike(t *testing.T) {
	const heading = "**What the consume loop does by default.**"
	var first string
	for _, path := range []string{"README.md", "../python/README.md", "../node/README.md"} {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		s := string(raw)
		at := strings.Index(s, heading)
		if at < 0 {
			t.Fatalf("%s does not say %s", path, heading)
		}
		para, _, _ := strings.Cut(s[at:], "\n\n")
		para = strings.Join(strings.Fields(para), " ")
		if first == "" {
			first = para
			continue
		}
		if para != first {
			t.Errorf("%s says\n%s\nREADME.md says\n%s", path, para, first)
		}
	}
	d := loadCases(t).ConsumeDefaults
	for _, want := range []string{
		fmt.Sprintf("up to %d messages from up to %d partitions", d.Batch, d.Partitions),
		fmt.Sprintf("waits up to %d s", d.WaitMs/1000),
		fmt.Sprintf("(concurrency %d)", d.Concurrency),
		fmt.Sprintf("(up to %d)", loadCases(t).ConcurrencyMax),
	} {
		if !strings.Contains(first, want) {
			t.Errorf("the READMEs do not say %q: %s", want, first)
		}
	}
}
