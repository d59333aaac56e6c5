package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// A dev directory belongs to one `queenside dev` at a time: its PostgreSQL,
// socket and spool are that process's. The lock is an flock on dev.lock,
// which the kernel lets go of when the process ends however it ends, so a
// PostgreSQL left behind by a process that is gone is found unlocked and
// cleaned up as before; the file also says who holds it, for the refusal.

const devLockFile = "dev.lock"

// devLock is a held lock on a dev directory.
type devLock struct{ f *os.File }

// lockDevDir takes dir's lock, creating dir if need be, and writes into it
// what a second `queenside dev` will be told: this process, its socket and
// its dashboard. If another process holds it, the error says which and how
// to reach it, and nothing was touched.
func lockDevDir(dir, socket, dashboard string) (*devLock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, devLockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s is in use by %s: stop that one first (Ctrl-C where it runs), or give this one another --dir",
				dir, describeHolder(string(holder)))
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	about := fmt.Sprintf("pid %d\nsocket %s\n", os.Getpid(), socket)
	if dashboard != "" {
		about += "dashboard " + dashboard + "\n"
	}
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(about), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	return &devLock{f: f}, nil
}

// describeHolder turns what dev.lock says into a phrase: "process 1234
// (its socket ..., its dashboard ...)".
func describeHolder(about string) string {
	fields := map[string]string{}
	for _, line := range strings.Split(about, "\n") {
		if k, v, ok := strings.Cut(line, " "); ok {
			fields[k] = v
		}
	}
	if fields["pid"] == "" {
		return "another queenside dev"
	}
	var reach []string
	if s := fields["socket"]; s != "" {
		reach = append(reach, "socket "+s)
	}
	if d := fields["dashboard"]; d != "" {
		reach = append(reach, "dashboard "+d)
	}
	desc := "queenside dev, process " + fields["pid"]
	if len(reach) > 0 {
		desc += " (" + strings.Join(reach, ", ") + ")"
	}
	return desc
}

// release lets the directory go; the process's end does the same.
func (l *devLock) release() {
	l.f.Truncate(0) //nolint:errcheck // what it says is only for a refusal
	l.f.Close()
}
