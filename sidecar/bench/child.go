package bench

import (
	"context"
	"fmt"
	"os"

	"strings"
	"syscall"
	"time"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/childproc"
)

// sidecarProc is the sidecar run as a child process, so that its CPU and
// memory can be read from /proc.
type sidecarProc struct {
	*childproc.Proc
	log string // its stdout and stderr
}

// startSidecar executes `bin serve` on socket against databaseURL, with
// its janitor running every retention (never when 0).
func startSidecar(bin, socket, databaseURL, spoolDir, logPath string, retention time.Duration, extra ...string) (*sidecarProc, error) {
	p, err := childproc.Start(bin, append([]string{"serve", "--socket", socket, "--database-url", databaseURL,
		"--spool-dir", spoolDir, "--retention-interval", retention.String(), "--log-level", "warn"}, extra...), logPath)
	if err != nil {
		return nil, fmt.Errorf("start sidecar: %w", err)
	}
	return &sidecarProc{Proc: p, log: logPath}, nil
}

// stop sends SIGTERM, which drains the sidecar, and waits; past the wait it
// kills it.
func (p *sidecarProc) stop(wait time.Duration) error {
	_, err := p.Signal(syscall.SIGTERM, wait)
	return err
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
		if child != nil && child.Exited() {
			return queenside.HealthResult{}, fmt.Errorf("sidecar exited during start-up (%v):\n%s", child.Err(), child.logTail())
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
