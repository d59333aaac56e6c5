package pgserver

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// A frozen server: every process of it stopped with SIGSTOP, as a host
// frozen by a storage stall or a hung hypervisor would leave it. The
// kernel still holds its sockets open and acknowledges what is sent to
// them, so clients see no error at all, only silence, until Thaw.

// Freeze stops the postmaster and every process it started (SIGSTOP), the
// postmaster first so that it starts no new one meanwhile.
func (s *Server) Freeze() error { return s.signalAll(syscall.SIGSTOP) }

// Thaw resumes what Freeze stopped (SIGCONT).
func (s *Server) Thaw() error { return s.signalAll(syscall.SIGCONT) }

func (s *Server) signalAll(sig syscall.Signal) error {
	pm, err := s.postmasterPID()
	if err != nil {
		return err
	}
	pids := append([]int{pm}, childrenOf(pm)...)
	for _, pid := range pids {
		if err := syscall.Kill(pid, sig); err != nil && err != syscall.ESRCH {
			return fmt.Errorf("pgserver: signal %v to process %d: %w", sig, pid, err)
		}
	}
	return nil
}

// postmasterPID reads the postmaster's process id from postmaster.pid.
func (s *Server) postmasterPID() (int, error) {
	b, err := os.ReadFile(filepath.Join(s.pgdata, "postmaster.pid"))
	if err != nil {
		return 0, fmt.Errorf("pgserver: the server is not running: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		return 0, fmt.Errorf("pgserver: postmaster.pid: %w", err)
	}
	return pid, nil
}

// childrenOf lists the processes whose parent is pid, from /proc.
func childrenOf(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after
		// its closing parenthesis.
		i := strings.LastIndexByte(string(stat), ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(stat[i+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			out = append(out, child)
		}
	}
	return out
}
