package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// What the benchmark reads of Linux's /proc. CPU times there are in clock
// ticks; ticksPerSecond converts them.

// procStat holds the fields of /proc/<pid>/stat that are used here.
type procStat struct {
	comm           string
	ppid           int
	utime, stime   int64 // this process, all threads
	cutime, cstime int64 // its children that exited and were waited for
}

func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	// The command name is in parentheses and may itself hold spaces and
	// parentheses, so the fields are counted from the last ')'.
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return procStat{}, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(s[end+1:])
	if len(f) < 15 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	// f[0] is field 3 (state) of proc(5); so field n is f[n-3].
	num := func(i int) int64 { v, _ := strconv.ParseInt(f[i], 10, 64); return v }
	return procStat{
		comm: s[open+1 : end], ppid: int(num(1)),
		utime: num(11), stime: num(12), cutime: num(13), cstime: num(14),
	}, nil
}

// childrenOf lists the live processes whose parent is ppid.
func childrenOf(ppid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var kids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := readStat(pid); err == nil && st.ppid == ppid {
			kids = append(kids, pid)
		}
	}
	return kids
}

// peakRSS returns VmHWM, the most resident memory pid has had since it
// started, in bytes.
func peakRSS(pid int) (int64, error) {
	return statusField(pid, "VmHWM:")
}

func statusField(pid int, key string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return kbField(f, key)
}

// kbField finds a "Key:   123 kB" line and returns the value in bytes.
func kbField(f *os.File, key string) (int64, error) {
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, key); ok {
			v, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return v * 1024, err
		}
	}
	return 0, fmt.Errorf("%s: no %s line", f.Name(), key)
}

// ticksPerSecond asks getconf once for the kernel's USER_HZ; 100 is what
// Linux uses on every common architecture, so it is the fallback.
func ticksPerSecond() int64 {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err == nil {
		if v, err := strconv.ParseInt(string(bytes.TrimSpace(out)), 10, 64); err == nil && v > 0 {
			return v
		}
	}
	return 100
}

// machine describes the host: online processors and their model from
// /proc/cpuinfo, and MemTotal from /proc/meminfo.
func machine() (cores int, model string, memBytes int64) {
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			switch strings.TrimSpace(k) {
			case "processor":
				cores++
			case "model name":
				model = strings.TrimSpace(v)
			}
		}
	}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		memBytes, _ = kbField(f, "MemTotal:")
		f.Close()
	}
	return cores, model, memBytes
}

// readPIDFile returns the number on the first line of a pid file, such as
// PostgreSQL's postmaster.pid.
func readPIDFile(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("%s: no process id on the first line", path)
	}
	return pid, nil
}
