package verify

import (
	"strings"
	"testing"
)

// A Citus coordinator has no standby here, and worker restarts and stalls
// need Citus workers: either is refused before anything starts, whether
// asked for by a count or in --faults, and only then. A partition is
// possible on Citus: the coordinator goes into a network namespace.
func TestValidateCitus(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string // "" is accepted
	}{
		{"failovers counted", func(c *Config) { c.Citus = true },
			"--pg-failovers 2 with --citus: a Citus coordinator has no standby here to fail over to; set --pg-failovers 0"},
		{"failover scheduled", func(c *Config) { c.Citus, c.PGFailovers, c.Faults = true, 0, "pg-restart@10s,pg-failover@60s" },
			"--faults has pg-failover with --citus: a Citus coordinator has no standby here to fail over to; leave it out of --faults"},
		{"worker restarts counted", func(c *Config) { c.WorkerRestarts = 1 },
			"--worker-restarts 1: worker-restart faults need --citus, without which there are no Citus workers to restart; add --citus or set --worker-restarts 0"},
		{"worker restart scheduled", func(c *Config) { c.Faults = "worker-restart@10s" },
			"--faults has worker-restart: worker-restart faults need --citus, without which there are no Citus workers to restart; add --citus or leave it out of --faults"},
		{"worker stalls counted", func(c *Config) { c.WorkerStalls = 2 },
			"--worker-stalls 2: worker-stall faults need --citus, without which there are no Citus workers to freeze; add --citus or set --worker-stalls 0"},
		{"worker stall scheduled", func(c *Config) { c.Faults = "worker-stall@10s" },
			"--faults has worker-stall: worker-stall faults need --citus, without which there are no Citus workers to freeze; add --citus or leave it out of --faults"},
		{"Citus with worker stalls and partitions", func(c *Config) {
			c.Citus, c.PGFailovers, c.Faults = true, 0, "worker-stall@10s,partition@60s,postgres-stall@100s"
		}, ""},
		{"no workers", func(c *Config) { c.Citus, c.PGFailovers, c.CitusWorkers = true, 0, 0 }, "--citus-workers 0: want 1..16"},
		{"Citus not loaded first", func(c *Config) {
			c.Citus, c.PGFailovers, c.PGSettings = true, 0, []string{"shared_preload_libraries=pg_stat_statements,citus"}
		}, `--pg-setting "shared_preload_libraries=pg_stat_statements,citus": on Citus, shared_preload_libraries must begin with citus`},
		{"Citus with worker restarts", func(c *Config) {
			c.Citus, c.PGFailovers, c.WorkerRestarts, c.PGSettings = true, 0, 2, []string{"shared_preload_libraries='citus,pg_stat_statements'"}
		}, ""},
		{"failovers scheduled away", func(c *Config) { c.Citus, c.Faults = true, "worker-restart@10s,pg-restart@60s" }, ""},
		{"worker restarts counted 0", func(c *Config) {}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.edit(&cfg)
			err := cfg.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("got %v\nwant %s", err, tc.want)
			}
		})
	}
}

// On Citus the worker restarts are placed like the other counts: all of
// them in the default ten minutes, apart, each done before the loader stops.
func TestScheduleWorkerRestarts(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Citus, cfg.PGFailovers, cfg.WorkerRestarts = true, 0, 2
	plan, err := cfg.schedule()
	if err != nil {
		t.Fatal(err)
	}
	var at []int
	for i, f := range plan {
		if f.Kind == FaultWorkerRestart {
			at = append(at, i)
		}
	}
	if len(at) != 2 || at[1] == at[0]+1 {
		t.Errorf("worker restarts at %v of %v", at, plan)
	}
	for i, done := range doneTimes(cfg, plan) {
		if done > cfg.Duration-trafficMargin(cfg.Duration) {
			t.Errorf("%s@%v done at %v", plan[i].Kind, plan[i].At, done)
		}
	}
}
