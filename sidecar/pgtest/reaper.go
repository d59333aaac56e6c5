package pgtest

import (
	"os"
	"os/exec"
	"strconv"
	"syscall"

	"github.com/queenside/queenside/sidecar/pgserver"
)

// reaperScript waits for the test binary ($1) to exit, then shuts the
// server down the way "pg_ctl stop -m immediate" would (SIGQUIT to the
// postmaster named in postmaster.pid), waits for it, and removes the files.
//
// It exists because pg_ctl daemonises the server: a test binary that dies
// without running teardown (go test -timeout panics, Ctrl-C, SIGKILL) would
// otherwise leave a server and its directories behind for every run.
// Signal handling in Main cannot cover these, and would steal signals from
// tests of the sidecar's own shutdown handling.
const reaperScript = `
p=$1; pgdata=$2; shift 2
while kill -0 "$p" 2>/dev/null; do sleep 1; done
if [ -f "$pgdata/postmaster.pid" ]; then
	pm=$(head -n 1 "$pgdata/postmaster.pid")
	if [ -n "$pm" ] && kill -QUIT "$pm" 2>/dev/null; then
		while kill -0 "$pm" 2>/dev/null; do sleep 0.1; done
	fi
fi
rm -rf "$@"
`

// startReaper starts the watchdog for s; nil if it cannot (the run goes on,
// only crash cleanup is lost).
func startReaper(s *pgserver.Server, dirs []string) *exec.Cmd {
	args := append([]string{"-c", reaperScript, "pgtest-reaper", strconv.Itoa(os.Getpid()), s.DataDir()}, dirs...)
	args = append(args, s.SocketDir())
	cmd := exec.Command("/bin/sh", args...)
	// Own process group: the terminal's Ctrl-C must reach the test binary,
	// not the reaper. No stdio: go test waits for every holder of the
	// binary's output pipes to close them.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil
	}
	return cmd
}

// stopReaper ends the watchdog once teardown has done its job.
func stopReaper(cmd *exec.Cmd) {
	if cmd == nil {
		return
	}
	cmd.Process.Kill()
	cmd.Wait()
}
