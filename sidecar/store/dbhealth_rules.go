package store

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Problem is one finding of a health reading, in a plain sentence.
// Severity is "warning" (look into it) or "critical" (the queues slow
// down or the disk fills if nothing is done). Kind and Name say what it
// is about: kind "transaction", "prepared", "slot", "table",
// "connections", "standby" or "replay"; name the table, slot, standby or
// prepared transaction, or the pid of the transaction.
type Problem struct {
	Severity string `json:"severity"`
	Kind     string `json:"kind"`
	Name     string `json:"name,omitempty"`
	Text     string `json:"text"`
}

// The thresholds of healthProblems, documented in sidecar/dashboard/API.md.
const (
	// An open transaction or prepared transaction this old is a warning,
	// and critical from the second figure on. Queenside's own last
	// milliseconds, while every push and ack updates a partitions or a
	// cursors row: a horizon held for a minute already keeps tens of
	// thousands of their dead versions from being pruned.
	openTransactionWarn, openTransactionCritical = time.Minute, 15 * time.Minute
	// A table is flagged from this many dead tuples, when they are at
	// least the warning share of its tuples (critical from the second) and
	// no vacuum came for vacuumLate: autovacuum starts at 20 % by default,
	// so it is then behind, held back or off.
	deadTuplesMin                        = 10_000
	deadPercentWarn, deadPercentCritical = 20.0, 50.0
	vacuumLate                           = 10 * time.Minute
	// A slot that is in use and holds back the horizon by this many
	// transactions is a warning; an unused one holding it is critical.
	slotXidAgeWarn = 10_000_000
	// An unused slot that keeps this much WAL is a warning.
	slotRetainedWALWarn = 1 << 30
	// Connections in use, in percent of those open to every role.
	connectionsWarn, connectionsCritical = 80.0, 95.0
	// A standby this far behind is a warning, critical from the second
	// figure; bytes count as well as seconds.
	standbyLagWarn, standbyLagCritical = 30 * time.Second, 5 * time.Minute
	standbyLagBytesWarn                = 1 << 30
)

// healthProblems turns a reading into sentences, most severe first, each
// rule in the order of the page.
func healthProblems(h DatabaseHealth) []Problem {
	var out []Problem
	add := func(severity, kind, name, format string, args ...any) {
		out = append(out, Problem{severity, kind, name, fmt.Sprintf(format, args...)})
	}
	level := func(v, warn, critical float64) string {
		switch {
		case v >= critical:
			return "critical"
		case v >= warn:
			return "warning"
		}
		return ""
	}

	if t := h.OldestTransaction; t != nil {
		age := time.Duration(t.AgeSeconds * float64(time.Second))
		who := fmt.Sprintf("pid %d, %s", t.PID, applicationLabel(t.Application))
		if t.State != "" {
			who += ", " + t.State
		}
		if sev := level(age.Seconds(), openTransactionWarn.Seconds(), openTransactionCritical.Seconds()); sev != "" {
			if t.HoldsHorizon {
				add(sev, "transaction", fmt.Sprint(t.PID), "A transaction open for %s holds back vacuum of the queue tables (%s).",
					roughDuration(age), who)
			} else {
				add("warning", "transaction", fmt.Sprint(t.PID), "A transaction open for %s holds its locks and a connection (%s).",
					roughDuration(age), who)
			}
		}
	}
	for _, p := range h.PreparedTransactions {
		age := time.Duration(p.AgeSeconds * float64(time.Second))
		if sev := level(age.Seconds(), openTransactionWarn.Seconds(), openTransactionCritical.Seconds()); sev != "" {
			add(sev, "prepared", p.GID, "Prepared transaction %q, prepared %s ago and neither committed nor rolled back, "+
				"holds back vacuum of the queue tables by %s transactions.", p.GID, roughDuration(age), roughCount(p.XidAge))
		}
	}
	for _, s := range h.ReplicationSlots {
		switch {
		case s.XidAge != nil && !s.Active:
			add("critical", "slot", s.Slot, "Replication slot %s is not in use and holds back vacuum of the queue tables by %s transactions: "+
				"drop it if its standby is gone.", s.Slot, roughCount(*s.XidAge))
		case s.XidAge != nil && *s.XidAge >= slotXidAgeWarn:
			add("warning", "slot", s.Slot, "Replication slot %s holds back vacuum of the queue tables by %s transactions "+
				"(a long query on its standby, with hot_standby_feedback).", s.Slot, roughCount(*s.XidAge))
		case s.CatalogXidAge != nil && !s.Active:
			add("warning", "slot", s.Slot, "Replication slot %s is not in use and holds back vacuum of the system catalogs by %s transactions.",
				s.Slot, roughCount(*s.CatalogXidAge))
		}
		if !s.Active && s.RetainedWALBytes != nil && *s.RetainedWALBytes >= slotRetainedWALWarn {
			add("warning", "slot", s.Slot, "Replication slot %s is not in use and keeps %s of WAL on the server's disk.",
				s.Slot, roughBytes(*s.RetainedWALBytes))
		}
	}
	for _, t := range h.Tables {
		if t.DeadTuples < deadTuplesMin || vacuumedWithin(t, h.At, vacuumLate) {
			continue
		}
		if sev := level(t.DeadPercent, deadPercentWarn, deadPercentCritical); sev != "" {
			add(sev, "table", t.Table, "%s has %s dead tuples (%.0f %%), %s.",
				t.Table, roughCount(t.DeadTuples), t.DeadPercent, lastAutovacuum(t.LastAutovacuum, h.At))
		}
	}
	if c := h.Connections; c.Max > c.Reserved {
		open := c.Max - c.Reserved
		pct := 100 * float64(c.Total) / float64(open)
		if sev := level(pct, connectionsWarn, connectionsCritical); sev != "" {
			add(sev, "connections", "", "%d of the %d connections open to every role are in use (%.0f %%): "+
				"a new sidecar or a growing pool may be refused.", c.Total, open, pct)
		}
	}
	for _, s := range h.Standbys {
		var lag time.Duration
		if s.ReplayLagSeconds != nil {
			lag = time.Duration(*s.ReplayLagSeconds * float64(time.Second))
		}
		var behind int64
		if s.ReplayLagBytes != nil {
			behind = *s.ReplayLagBytes
		}
		sev := level(lag.Seconds(), standbyLagWarn.Seconds(), standbyLagCritical.Seconds())
		if sev == "" && behind >= standbyLagBytesWarn {
			sev = "warning"
		}
		if sev != "" {
			name := applicationLabel(s.Application)
			add(sev, "standby", s.Application, "Standby %s (%s) replays %s behind this server (%s of WAL).",
				name, s.ClientAddr, roughDuration(lag), roughBytes(behind))
		}
	}
	if r := h.Replay; r != nil && !r.CaughtUp && r.SecondsSince != nil {
		since := time.Duration(*r.SecondsSince * float64(time.Second))
		if sev := level(since.Seconds(), standbyLagWarn.Seconds(), standbyLagCritical.Seconds()); sev != "" {
			add(sev, "replay", "", "This server is a standby that has not caught up with its primary: "+
				"the last transaction it replayed committed %s ago.", roughDuration(since))
		}
	}

	// Critical first, keeping each rule's order within a severity.
	sorted := make([]Problem, 0, len(out))
	for _, sev := range []string{"critical", "warning"} {
		for _, p := range out {
			if p.Severity == sev {
				sorted = append(sorted, p)
			}
		}
	}
	return sorted
}

func applicationLabel(app string) string {
	if app == "" {
		return "no application name"
	}
	return fmt.Sprintf("%q", app)
}

// vacuumedWithin tells whether vacuum, automatic or not, ran on t in the
// last d before now.
func vacuumedWithin(t TableHealth, now time.Time, d time.Duration) bool {
	for _, at := range []*time.Time{t.LastAutovacuum, t.LastVacuum} {
		if at != nil && now.Sub(*at) < d {
			return true
		}
	}
	return false
}

func lastAutovacuum(at *time.Time, now time.Time) string {
	if at == nil {
		return "never autovacuumed"
	}
	return "last autovacuum " + roughDuration(now.Sub(*at)) + " ago"
}

// roughDuration is d as an operator reads it: "45 s", "41 min", "3 h",
// "3 h 5 min", "2 d 4 h", as the dashboard's duration() writes it.
func roughDuration(d time.Duration) string {
	s := int64(math.Round(max(d.Seconds(), 0)))
	pair := func(a int64, ua string, b int64, ub string) string {
		if b == 0 {
			return fmt.Sprintf("%d %s", a, ua)
		}
		return fmt.Sprintf("%d %s %d %s", a, ua, b, ub)
	}
	switch {
	case s < 60:
		return fmt.Sprintf("%d s", s)
	case s < 3600:
		return fmt.Sprintf("%d min", s/60)
	case s < 86400:
		return pair(s/3600, "h", s%3600/60, "min")
	}
	return pair(s/86400, "d", s%86400/3600, "h")
}

// roughCount is n with two or three significant digits: "9,876", "12 k",
// "2.1 M", "1.3 G".
func roughCount(n int64) string {
	if n < 10_000 {
		s := fmt.Sprint(n)
		if len(s) > 3 {
			s = s[:len(s)-3] + "," + s[len(s)-3:]
		}
		return s
	}
	for _, u := range []struct {
		div  float64
		unit string
	}{{1e9, "G"}, {1e6, "M"}, {1e3, "k"}} {
		if v := float64(n) / u.div; v >= 1 {
			return strings.TrimSuffix(fmt.Sprintf("%.*f", digitsAfter(v), v), ".0") + " " + u.unit
		}
	}
	return fmt.Sprint(n)
}

// roughBytes is n in binary units: "512 B", "3.4 MiB", "12 GiB".
func roughBytes(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	v, i := float64(n), 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.*f %s", digitsAfter(v), v, units[i])
}

func digitsAfter(v float64) int {
	if v < 10 {
		return 1
	}
	return 0
}
