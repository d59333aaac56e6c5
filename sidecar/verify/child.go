package verify

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// child is one incarnation of a sidecar process.
type child struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once it has exited
	err  error         // how it exited; read after done
}

// startChild executes bin with args, appending its output to logPath.
func startChild(bin string, args []string, logPath string) (*child, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child holds its own descriptor
	fmt.Fprintf(logf, "--- %s: starting %s\n", time.Now().UTC().Format(time.RFC3339Nano), strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = withoutQueensideEnv(os.Environ())
	// Its own process group: a Ctrl-C in the terminal reaches only the
	// verifier, which then stops the sidecars and PostgreSQL in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	c := &child{cmd: cmd, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

// withoutQueensideEnv drops QUEENSIDE_* variables, which would otherwise
// configure the child beyond the flags given.
func withoutQueensideEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "QUEENSIDE_") {
			out = append(out, kv)
		}
	}
	return out
}

func (c *child) pid() int { return c.cmd.Process.Pid }

func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// signal sends sig and waits up to wait for the exit; past it, it kills.
// It returns how long the exit took.
func (c *child) signal(sig syscall.Signal, wait time.Duration) (time.Duration, error) {
	start := time.Now()
	if c.exited() {
		return 0, nil
	}
	c.cmd.Process.Signal(sig) //nolint:errcheck // it may exit meanwhile; Wait tells
	select {
	case <-c.done:
		return time.Since(start), nil
	case <-time.After(wait):
		c.cmd.Process.Kill() //nolint:errcheck
		<-c.done
		return time.Since(start), fmt.Errorf("did not exit within %v of %v; killed", wait, sig)
	}
}

// exitStatus describes how the process ended.
func (c *child) exitStatus() string {
	if c.err == nil {
		return "exit status 0"
	}
	return c.err.Error()
}
