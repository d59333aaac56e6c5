package bench

import (
	"os"
	"time"
)

// probe reads the CPU time and memory of the processes under measurement.
// A pid of 0 is a process that cannot be observed; its figures are unknown.
type probe struct {
	sidecarPID    int
	postmasterPID int
	hz            float64
}

// cpuSample is the CPU ticks each party had used at one moment; nil when
// the process could not be read.
type cpuSample struct {
	sidecar, postgres, bench *int64
}

func (p *probe) sample() cpuSample {
	var s cpuSample
	if p.sidecarPID > 0 {
		if st, err := readStat(p.sidecarPID); err == nil {
			s.sidecar = ptr(st.utime + st.stime)
		}
	}
	if p.postmasterPID > 0 {
		if t, ok := postgresTicks(p.postmasterPID); ok {
			s.postgres = &t
		}
	}
	if st, err := readStat(os.Getpid()); err == nil {
		s.bench = ptr(st.utime + st.stime)
	}
	return s
}

// postgresTicks is the CPU of a whole PostgreSQL server: the postmaster,
// every live process it forked (backends, walwriter, checkpointer...), and
// the children that already exited, which the postmaster has reaped into
// its cutime and cstime. A backend that exits between two samples thus
// moves from one term to the other without being lost.
func postgresTicks(postmaster int) (int64, bool) {
	pm, err := readStat(postmaster)
	if err != nil {
		return 0, false
	}
	total := pm.utime + pm.stime + pm.cutime + pm.cstime
	for _, kid := range childrenOf(postmaster) {
		if st, err := readStat(kid); err == nil {
			total += st.utime + st.stime
		}
	}
	return total, true
}

// meter brackets the measured part of a scenario: wall time, CPU spent by
// each party in between, and the sidecar's peak memory at the end.
type meter struct {
	p      *probe
	start  time.Time
	before cpuSample
}

func (p *probe) start() *meter {
	return &meter{p: p, before: p.sample(), start: time.Now()}
}

func (m *meter) stop(r *Result) {
	r.Seconds = time.Since(m.start).Seconds()
	after := m.p.sample()
	r.SidecarCPUSeconds = m.p.seconds(m.before.sidecar, after.sidecar)
	r.PostgresCPUSeconds = m.p.seconds(m.before.postgres, after.postgres)
	r.BenchCPUSeconds = m.p.seconds(m.before.bench, after.bench)
	if m.p.sidecarPID > 0 {
		if v, err := peakRSS(m.p.sidecarPID); err == nil {
			r.SidecarPeakRSSBytes = &v
		}
	}
}

func (p *probe) seconds(before, after *int64) *float64 {
	if before == nil || after == nil {
		return nil
	}
	return ptr(float64(*after-*before) / p.hz)
}

func ptr[T any](v T) *T { return &v }
