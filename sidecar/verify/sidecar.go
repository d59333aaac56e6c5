package verify

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"

	"github.com/queenside/queenside/sidecar/childproc"
)

// Waits of the sidecar processes.
const (
	healthyTimeout = 60 * time.Second // a started sidecar: migrations may run first
	shutdownGrace  = 10 * time.Second // the sidecars' --shutdown-grace
	exitWait       = shutdownGrace + 10*time.Second
)

// sidecar is one sidecar slot of the run: a socket, a spool directory and
// an HTTP port that every incarnation of the process reuses, so a
// restarted sidecar replays what its predecessor spooled.
type sidecar struct {
	index    int
	bin      string
	dbURL    string
	dbWait   time.Duration // its --database-timeout
	socket   string
	spoolDir string
	logPath  string
	httpAddr string

	mu           sync.Mutex
	proc         *childproc.Proc // nil while down
	stopping     bool            // the run signalled it: its exit is no crash
	incarnations int
	ended        spoolCounters // summed over incarnations that ended
	last         spoolCounters // the live incarnation's last sample
}

func newSidecar(index int, bin, dbURL, dir string, dbWait time.Duration) (*sidecar, error) {
	addr, err := freeLocalAddr()
	if err != nil {
		return nil, err
	}
	name := "sidecar" + strconv.Itoa(index)
	return &sidecar{
		index: index, bin: bin, dbURL: dbURL, dbWait: dbWait,
		socket:   dir + "/" + name + ".sock",
		spoolDir: dir + "/" + name + "-spool",
		logPath:  dir + "/" + name + ".log",
		httpAddr: addr,
	}, nil
}

// freeLocalAddr finds a TCP port free now on the loopback interface; the
// sidecar's HTTP port, for /metrics.
func freeLocalAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func (s *sidecar) String() string { return "sidecar " + strconv.Itoa(s.index) }

// start runs a new incarnation and waits until it answers health ok, or,
// when PostgreSQL is down on purpose (dbDown), until it answers at all: a
// sidecar serves its socket, and spools, without its database.
func (s *sidecar) start(ctx context.Context, dbDown bool) (string, error) {
	args := []string{"serve", "--socket", s.socket, "--database-url", s.dbURL, "--spool-dir", s.spoolDir,
		"--http-addr", s.httpAddr, "--shutdown-grace", shutdownGrace.String(), "--database-timeout", s.dbWait.String(), "--log-level", "warn"}
	p, err := childproc.Start(s.bin, args, s.logPath)
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	s.proc, s.stopping, s.last = p, false, spoolCounters{}
	s.incarnations++
	s.mu.Unlock()
	return s.waitHealthy(ctx, p, dbDown)
}

func (s *sidecar) waitHealthy(ctx context.Context, p *childproc.Proc, dbDown bool) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, healthyTimeout)
	defer cancel()
	var last error
	for {
		if p.Exited() {
			return "", fmt.Errorf("%s exited during start-up (%s):\n%s", s, p.ExitStatus(), s.logTail())
		}
		h, err := healthOnce(ctx, s.socket)
		if err == nil && (h.Status == protocol.HealthOK || dbDown && h.Status == protocol.HealthUnavailable) {
			return h.Version, nil
		}
		if err == nil {
			err = fmt.Errorf("health is %s: %s", h.Status, h.Database.Error)
		}
		last = err
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("%s not healthy: %w", s, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func healthOnce(ctx context.Context, socket string) (queenside.HealthResult, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	c, err := queenside.Dial(ctx, socket)
	if err != nil {
		return queenside.HealthResult{}, err
	}
	defer c.Close()
	return c.Health(ctx)
}

// stop signals the live incarnation (SIGKILL or SIGTERM) and waits for its
// exit. Its spool counters are sampled just before, so the report loses at
// most what happened in the instant between the sample and the signal.
func (s *sidecar) stop(ctx context.Context, sig syscall.Signal) (time.Duration, string, error) {
	s.mu.Lock()
	p := s.proc
	s.stopping = true
	s.mu.Unlock()
	if p == nil {
		return 0, "", errors.New(s.String() + " is not running")
	}
	s.sample(ctx)
	took, err := p.Signal(sig, exitWait)
	s.endIncarnation(p)
	return took, p.ExitStatus(), err
}

func (s *sidecar) endIncarnation(p *childproc.Proc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != p {
		return
	}
	last := s.last
	last.Records = 0 // a gauge: what the next incarnation finds, it reports itself
	s.ended = s.ended.plus(last)
	s.proc, s.last, s.stopping = nil, spoolCounters{}, false
}

// sample reads the live incarnation's spool counters.
func (s *sidecar) sample(ctx context.Context) error {
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if p == nil {
		return nil
	}
	c, err := scrapeSpool(ctx, s.httpAddr)
	if err != nil {
		return err
	}
	s.mu.Lock()
	if s.proc == p {
		s.last = c
	}
	s.mu.Unlock()
	return nil
}

// current returns the live incarnation's last sample.
func (s *sidecar) current() spoolCounters {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// spool returns the counters summed over every incarnation so far.
func (s *sidecar) spool() spoolCounters {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended.plus(s.last)
}

func (s *sidecar) up() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil && !s.proc.Exited()
}

// crashed reports an incarnation that exited without being told to, and
// ends it, so that it can be started again.
func (s *sidecar) crashed() (string, bool) {
	s.mu.Lock()
	p, stopping := s.proc, s.stopping
	s.mu.Unlock()
	if p == nil || stopping || !p.Exited() {
		return "", false
	}
	s.endIncarnation(p)
	return p.ExitStatus(), true
}

func (s *sidecar) incarnationCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.incarnations
}

// logTail returns the end of the sidecar's log, for error messages.
func (s *sidecar) logTail() string {
	b, _ := os.ReadFile(s.logPath)
	const keep = 3000
	if len(b) > keep {
		b = b[len(b)-keep:]
	}
	return strings.TrimSpace(string(b))
}
