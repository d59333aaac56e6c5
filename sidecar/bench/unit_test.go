package bench

import (
	"testing"
	"time"
)

func TestPayloadCarriesPushTime(t *testing.T) {
	for _, size := range []int{8, 200, 300, 70000} {
		p, err := newPayloads(size)
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		got, ok := sentAt(p.stamped(now))
		if !ok || !got.Equal(time.Unix(0, now.UnixNano())) {
			t.Errorf("size %d: sentAt = %v, %v; want %v", size, got, ok, now)
		}
	}
	if _, ok := sentAt([]byte{0xa1, 'x'}); ok {
		t.Error("a string payload was read as a time")
	}
}

func TestPercentiles(t *testing.T) {
	d := make([]time.Duration, 100)
	for i := range d {
		d[len(d)-1-i] = time.Duration(i+1) * time.Millisecond // unsorted on purpose
	}
	s := summarize(d)
	if s.Count != 100 || s.P50Ms != 50 || s.P99Ms != 99 || s.MaxMs != 100 || s.MeanMs != 50.5 {
		t.Errorf("summary %+v", s)
	}
	if summarize(nil) != nil {
		t.Error("an empty set has a summary")
	}
	if one := summarize([]time.Duration{time.Millisecond}); one.P50Ms != 1 || one.P99Ms != 1 {
		t.Errorf("one value: %+v", one)
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u:secret@h/db":                "postgres://u:xxxxx@h/db",
		"postgres://u@h/db?password=secret":       "postgres://u@h/db?password=xxxxx",
		"postgres:///db?host=%2Ftmp":              "postgres:///db?host=%2Ftmp",
		"host=h user=u password=secret dbname=db": "host=h user=u password=xxxxx dbname=db",
		"host=h password='se cret' dbname=db":     "host=h password=xxxxx dbname=db",
		"":                                        "",
	} {
		if got := redactURL(in); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestThousands(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 999.4: "999", 1000: "1,000", 123456.7: "123,457", 1234567: "1,234,567"} {
		if got := thousands(v); got != want {
			t.Errorf("thousands(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	bad := DefaultConfig()
	bad.Scenarios = []string{"push", "nonsense"}
	if bad.Validate() == nil {
		t.Error("an unknown scenario was accepted")
	}
	bad = DefaultConfig()
	bad.PayloadBytes = 4
	if bad.Validate() == nil {
		t.Error("a payload too small for the push time was accepted")
	}
}
