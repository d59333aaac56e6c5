// Package childproc runs a sidecar (or any command) as a child process for
// the programs that drive real processes: the bench and the verifier. The
// child gets its own process group and none of the QUEENSIDE_* variables,
// and its output is appended to a log file.
package childproc

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Proc is one run of a child process.
type Proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once it has exited
	err  error         // how it exited; read after done
}

// Start executes bin with args, appending its output to logPath.
func Start(bin string, args []string, logPath string) (*Proc, error) {
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
	// driving program, which then stops its children and PostgreSQL in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	c := &Proc{cmd: cmd, done: make(chan struct{})}
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

// Pid is the child's process id.
func (c *Proc) Pid() int { return c.cmd.Process.Pid }

// Done is closed once the child has exited.
func (c *Proc) Done() <-chan struct{} { return c.done }

// Err is how the child exited; nil before it has.
func (c *Proc) Err() error {
	if !c.Exited() {
		return nil
	}
	return c.err
}

// Exited reports whether the child has exited.
func (c *Proc) Exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// Signal sends sig and waits up to wait for the exit; past it, it kills.
// It returns how long the exit took.
func (c *Proc) Signal(sig syscall.Signal, wait time.Duration) (time.Duration, error) {
	start := time.Now()
	if c.Exited() {
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

// ExitStatus describes how the process ended.
func (c *Proc) ExitStatus() string {
	if c.err == nil {
		return "exit status 0"
	}
	return c.err.Error()
}
