package bench

import (
	"testing"
	"time"
)

// TestLiveQueueConsumers runs curve at a tiny size with each kind of
// consumer the live queue can have: the tuned pop cycle, the Go consume
// loop with a concurrency and a handler that waits, and the Python and
// Node consume loops as programs. Each delivers everything pushed, with
// no error; speed is never asserted.
func TestLiveQueueConsumers(t *testing.T) {
	bin := buildSidecar(t)
	for _, tc := range []struct {
		name string
		set  func(*Config)
	}{
		{"pop", func(c *Config) { c.Consumer = ConsumerPop }},
		{"loop, concurrency 3, a handler that waits", func(c *Config) {
			c.ConsumeConcurrency, c.HandlerWait = 3, time.Millisecond
		}},
		{"python", func(c *Config) { c.ConsumerCommand = "/usr/bin/python3 apps/consume.py" }},
		{"node", func(c *Config) { c.ConsumerCommand = "node apps/consume.mjs" }},
		{"node, concurrency 2", func(c *Config) {
			c.ConsumerCommand, c.ConsumeConcurrency, c.HandlerWait = "node apps/consume.mjs", 2, time.Millisecond
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tinyConfig(t, bin, ScenarioCurve)
			cfg.MixedPartitions = 50
			cfg.CurveRates = []int{500}
			cfg.CurveDuration = time.Second
			tc.set(&cfg)
			r := runLogged(t, cfg, 2*time.Minute).Scenarios[0]
			if r.Failed || r.Errors != 0 || len(r.Curve) != 1 {
				t.Fatalf("failed %v with %d errors: %v", r.Failed, r.Errors, r.ErrorSamples)
			}
			p := r.Curve[0]
			if p.Pushed == 0 || !p.Drained || p.Delivered+p.Left != p.Pushed || p.Redelivered != 0 {
				t.Fatalf("pushed %d, delivered %d in the window and %d left, drained %v, %d redelivered",
					p.Pushed, p.Delivered, p.Left, p.Drained, p.Redelivered)
			}
			if p.Delivery == nil || p.PartitionsServed != p.PartitionsPushed {
				t.Fatalf("delivery %v; %d of %d partitions served", p.Delivery, p.PartitionsServed, p.PartitionsPushed)
			}
		})
	}
}
