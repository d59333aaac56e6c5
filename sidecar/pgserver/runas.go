package pgserver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"syscall"
	"time"
)

// runAs runs the server programs as the right user. initdb and postgres
// refuse to run as root, so when we are root every command goes through
// `runuser -u postgres --` and every file the server touches must belong to
// postgres. Otherwise commands run as ourselves and nothing is chowned.
type runAs struct {
	user    string // "" when running as ourselves
	uid     int
	gid     int
	runuser string
}

func newRunAs() (*runAs, error) {
	if os.Geteuid() != 0 {
		return &runAs{}, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, and initdb refuses to run as root, but there is no postgres user to run it as: %w", err)
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return nil, fmt.Errorf("postgres uid %q: %w", u.Uid, err)
	}
	gid, err := strconv.Atoi(u.Gid)
	if err != nil {
		return nil, fmt.Errorf("postgres gid %q: %w", u.Gid, err)
	}
	ru, err := exec.LookPath("runuser")
	if err != nil {
		return nil, fmt.Errorf("running as root needs runuser to switch to the postgres user: %w", err)
	}
	return &runAs{user: u.Username, uid: uid, gid: gid, runuser: ru}, nil
}

// command builds a command for a server program.
//
// It runs in its own process group so that a terminal's Ctrl-C, which goes
// to the whole foreground group, reaches only the Go process: pg_ctl must be
// left to finish starting or stopping the server (the postmaster itself is
// put in its own session by pg_ctl). Cancelling ctx sends SIGTERM rather
// than SIGKILL so initdb can clean up a half-made cluster. The working
// directory is / because ours may be unreadable by postgres, and all paths
// we pass are absolute.
func (r *runAs) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	var cmd *exec.Cmd
	if r.user == "" {
		cmd = exec.CommandContext(ctx, name, args...)
	} else {
		cmd = exec.CommandContext(ctx, r.runuser, append([]string{"-u", r.user, "--", name}, args...)...)
	}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

// chown gives path to the server user; a no-op when running as ourselves.
func (r *runAs) chown(path string) error {
	if r.user == "" {
		return nil
	}
	return os.Chown(path, r.uid, r.gid)
}

// canReach reports whether the server user can get to files inside dir
// (search permission on dir and every ancestor). Asking the kernel, via
// `test -x` run as that user, is simpler and more faithful than walking
// modes, ACLs and group memberships ourselves.
func (r *runAs) canReach(dir string) bool {
	if r.user == "" {
		return true
	}
	return exec.Command(r.runuser, "-u", r.user, "--", "test", "-x", dir).Run() == nil
}

// ownedByServerUser reports whether path belongs to the user the server runs
// as. PostgreSQL refuses a data directory owned by anyone else.
func (r *runAs) ownedByServerUser(path string) (bool, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return false, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return true, nil
	}
	want := os.Geteuid()
	if r.user != "" {
		want = r.uid
	}
	return int(st.Uid) == want, nil
}
