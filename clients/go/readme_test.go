package queenside_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
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
	t.Helper()
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	section := string(readme)
	start := strings.Index(section, "\n## Quick start\n")
	if start < 0 {
		t.Fatal("README.md has no Quick start section")
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
		t.Fatalf("the quick start's commands (%q) or complete program (%q) are missing", commands, program)
	}
	return commands, program
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
	checkout, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(commands, socketPlaceholder) || !strings.Contains(commands, "-replace github.com/queenside/queenside="+checkoutPlaceholder+"\n") {
		t.Fatalf("the commands name neither the checkout nor the socket as this test expects:\n%s", commands)
	}
	commands = strings.ReplaceAll(commands, socketPlaceholder, socket)
	commands = strings.ReplaceAll(commands, checkoutPlaceholder, checkout)

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(program), 0o644); err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "QUEENSIDE_SOCKET=") {
			env = append(env, kv)
		}
	}
	env = append(env, "GOPROXY=off", "GOSUMDB=off", "GOWORK=off", "GOFLAGS=")

	var lines []string
	for _, l := range strings.Split(commands, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	for _, l := range lines[:len(lines)-1] {
		cmd := exec.Command("sh", "-ec", l)
		cmd.Dir, cmd.Env = dir, env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", l, err, out)
		}
	}

	// The last command runs the program: VAR=value... command args...
	last := strings.Fields(lines[len(lines)-1])
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
