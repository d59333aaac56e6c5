package sidecar

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// ErrSocketInUse means a live process already serves the socket path.
var ErrSocketInUse = errors.New("socket is in use by a running process")

// ListenSocket creates the Unix socket at path with the given file mode. A
// socket file left by a dead process (connections refused) is replaced; one
// that a live process answers on is refused, so two sidecars never fight over
// one path.
func ListenSocket(path string, mode os.FileMode) (*net.UnixListener, error) {
	if len(path) > 107 {
		return nil, fmt.Errorf("listen on %s: socket paths are limited to 107 bytes, this one has %d", path, len(path))
	}
	if err := removeStaleSocket(path); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(true)
	if err := os.Chmod(path, mode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("listen on %s: set mode %o: %w", path, mode, err)
	}
	return ln, nil
}

func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("listen on %s: %w", path, err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("listen on %s: the path exists and is not a socket; refusing to replace it", path)
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("listen on %s: %w; stop it first or choose another --socket", path, ErrSocketInUse)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("listen on %s: probe existing socket: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("listen on %s: remove stale socket: %w", path, err)
	}
	return nil
}
