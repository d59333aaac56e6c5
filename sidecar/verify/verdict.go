package verify

import "fmt"

// verdictRule is printed under the verdict.
const verdictRule = "(a run passes when every queue holds every event once and in order, but those a damaged spool record cost and its sidecar reported by name, nothing unexpected was answered, every planned fault was carried out and the pipeline drained; " +
	"a consumer fault always has traffic to act on, since the loader pushes past --duration until the last one is carried out)"

// passed is the verdict: no violation, no unexpected error, every fault
// carried out, drained, and not interrupted. A fault that was not carried
// out fails the run, whatever the reason: the run did not test what it
// said it would.
func passed(rep *Report, interrupted bool) bool {
	return !interrupted && rep.Drained && len(rep.Violations) == 0 && rep.Unexpected == 0 && faultErrors(rep) == 0
}

func faultErrors(rep *Report) int {
	n := 0
	for _, f := range rep.Faults {
		if f.Error != "" {
			n++
		}
	}
	return n
}

// faultsInjected counts the faults carried out: neither failed nor
// skipped.
func faultsInjected(rep *Report) int {
	n := 0
	for _, f := range rep.Faults {
		if f.Error == "" && f.Skipped == "" {
			n++
		}
	}
	return n
}

func trafficEnded(rep *Report) int {
	n := 0
	for _, f := range rep.Faults {
		if f.Error == errTrafficEnded.Error() {
			n++
		}
	}
	return n
}

// failureSummary is the error a failed run returns.
func failureSummary(rep *Report) string {
	var parts []string
	if v := len(rep.Violations); v > 0 {
		parts = append(parts, fmt.Sprintf("%d violations (%d duplicates, %d gaps, %d order violations)",
			totalViolations(rep), rep.Duplicates, rep.Gaps, rep.OrderViolations))
	}
	if rep.Unexpected > 0 {
		parts = append(parts, fmt.Sprintf("%d unexpected errors", rep.Unexpected))
	}
	if n := faultErrors(rep); n > 0 {
		s := fmt.Sprintf("%d faults not carried out as planned", n)
		if late := trafficEnded(rep); late > 0 {
			s += fmt.Sprintf(" (%d of them because the traffic had ended)", late)
		}
		parts = append(parts, s)
	}
	if !rep.Drained {
		parts = append(parts, "the pipeline did not drain")
	}
	if len(parts) == 0 {
		return "verification failed"
	}
	return "verification failed: " + joinAnd(parts)
}

func totalViolations(rep *Report) int64 {
	var n int64
	for _, c := range rep.ViolationCounts {
		n += c
	}
	return n
}

func joinAnd(parts []string) string {
	s := ""
	for i, p := range parts {
		switch {
		case i == 0:
		case i == len(parts)-1:
			s += " and "
		default:
			s += ", "
		}
		s += p
	}
	return s
}
