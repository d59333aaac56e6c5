package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
)

// sidecarProc is the sidecar run as a child process, so that its CPU and
// memory can be read from /proc.
type sidecarProc struct {
	cmd  *exec.Cmd
	log  string        // its stdout and stderr
	done chan struct{} // closed once it has exited
	err  error         // how it exited; read after done
}

// startSidecar executes `bin serve` on socket against databaseURL, with
// its janitor running every retention (never when 0).
func startSidecar(bin, socket, databaseURL, spoolDir, logPath string, retention time.Duration) (*sidecarProc, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child holds its own descriptor
	cmd := exec.Command(bin, "serve", "--socket", socket, "--database-url", databaseURL,
		"--spool-dir", spoolDir, "--retention-interval", retention.String(), "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = withoutQueensideEnv(os.Environ())
	// Its own process group: a Ctrl-C in the terminal reaches only the
	// benchmark, which then stops the sidecar and PostgreSQL in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start sidecar %s: %w", bin, err)
	}
	p := &sidecarProc{cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// withoutQueensideEnv drops QUEENSIDE_* variables, which would otherwise
// configure the child beyond the flags given (an HTTP port, say).
func withoutQueensideEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "QUEENSIDE_") {
			out = append(out, kv)
		}
	}
	return out
}

func (p *sidecarProc) pid() int { return p.cmd.Process.Pid }

func (p *sidecarProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, which drains the sidecar, and waits; past the wait it
// kills it.
func (p *sidecarProc) stop(wait time.Duration) error {
	if p.exited() {
		return nil
	}
	p.cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck // it may exit meanwhile; Wait tells
	select {
	case <-p.done:
		return nil
	case <-time.After(wait):
		p.cmd.Process.Kill() //nolint:errcheck
		<-p.done
		return fmt.Errorf("sidecar did not stop within %v of SIGTERM; killed", wait)
	}
}

// logTail returns the end of the child's log, for error messages.
func (p *sidecarProc) logTail() string {
	b, _ := os.ReadFile(p.log)
	const keep = 4000
	if len(b) > keep {
		b = b[len(b)-keep:]
	}
	return strings.TrimSpace(string(b))
}

// waitHealthy polls health on socket until it answers ok. A child that
// exits meanwhile ends the wait at once, with its log.
func waitHealthy(ctx context.Context, socket string, child *sidecarProc, timeout time.Duration) (queenside.HealthResult, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		if child != nil && child.exited() {
			return queenside.HealthResult{}, fmt.Errorf("sidecar exited during start-up (%v):\n%s", child.err, child.logTail())
		}
		h, err := healthOnce(ctx, socket)
		if err == nil && h.Status == protocol.HealthOK {
			return h, nil
		}
		if err == nil {
			err = fmt.Errorf("health is %s: %s", h.Status, h.Database.Error)
		}
		last = err
		select {
		case <-ctx.Done():
			return queenside.HealthResult{}, fmt.Errorf("sidecar on %s not healthy: %w", socket, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func healthOnce(ctx context.Context, socket string) (queenside.HealthResult, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := queenside.Dial(ctx, socket)
	if err != nil {
		return queenside.HealthResult{}, err
	}
	defer c.Close()
	return c.Health(ctx)
}
