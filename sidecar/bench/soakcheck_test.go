package bench

import (
	"strings"
	"testing"
	"time"
)

// samplesOf makes a sample every 10 s for span, each table at the size and
// tuples size(t) gives, with retained messages at the segments' live tuples.
func samplesOf(span time.Duration, size func(at time.Duration) TableSample) []SoakSample {
	var out []SoakSample
	for at := time.Duration(0); at <= span; at += 10 * time.Second {
		s := SoakSample{Seconds: at.Seconds(), Tables: map[string]TableSample{}}
		for _, name := range soakTables {
			s.Tables[name] = size(at)
		}
		s.Retained = s.Tables["segments"].LiveTuples
		out = append(out, s)
	}
	return out
}

func TestSoakCheckPassesFlatTables(t *testing.T) {
	// A sawtooth: dead tuples pile up for 60 s and a vacuum clears them.
	rep := checkSoak(samplesOf(10*time.Minute, func(at time.Duration) TableSample {
		dead := int64(at/time.Second%60) * 1000
		return TableSample{TotalBytes: 50<<20 + dead*100, LiveTuples: 20000, DeadTuples: dead}
	}), 2*time.Minute)
	if len(rep.Violations) != 0 {
		t.Fatalf("flat tables judged grown: %v", rep.Violations)
	}
	if strings.Join(rep.Unchecked, ",") != "dedup,orphan_hashes" {
		t.Errorf("unchecked %v: the hashes' tables settle only after 900 s", rep.Unchecked)
	}
	if len(rep.Checked) != 1+3*(len(soakTables)-2) {
		t.Errorf("%d checks: %+v", len(rep.Checked), rep.Checked)
	}
}

func TestSoakCheckFailsGrowingTables(t *testing.T) {
	// What a janitor that stopped at 3 minutes looks like: the messages it
	// no longer deletes pile up.
	rep := checkSoak(samplesOf(10*time.Minute, func(at time.Duration) TableSample {
		live := int64(20000)
		if at > 3*time.Minute {
			live += int64((at-3*time.Minute)/time.Second) * 500
		}
		return TableSample{TotalBytes: live * 300, LiveTuples: live}
	}), 2*time.Minute)
	var grew []string
	for _, v := range rep.Violations {
		grew = append(grew, strings.SplitN(v, " grew", 2)[0])
	}
	for _, want := range []string{"queue retained messages", "segments bytes", "segments live tuples"} {
		if !strings.Contains(strings.Join(grew, ","), want) {
			t.Errorf("%s not judged grown; violations %v", want, rep.Violations)
		}
	}
}

func TestSoakCheckHoldsHashesAfterTheirHorizon(t *testing.T) {
	rep := checkSoak(samplesOf(20*time.Minute, func(at time.Duration) TableSample {
		return TableSample{TotalBytes: 10 << 20, LiveTuples: 1000}
	}), 2*time.Minute)
	if len(rep.Unchecked) != 0 || len(rep.Checked) != 1+3*len(soakTables) {
		t.Fatalf("a run past the horizon: unchecked %v, %d checks", rep.Unchecked, len(rep.Checked))
	}
}
