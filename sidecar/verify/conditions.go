package verify

import (
	"bufio"
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queenside/queenside/schema"
)

// Conditions are the facts that decide whether two reports can be compared.
type Conditions struct {
	Cores          int               `json:"cores"` // processors listed in /proc/cpuinfo
	CPUModel       string            `json:"cpuModel,omitempty"`
	MemoryBytes    int64             `json:"memoryBytes"`
	OS             string            `json:"os,omitempty"` // PRETTY_NAME of /etc/os-release
	GoVersion      string            `json:"goVersion"`
	OSArch         string            `json:"osArch"`
	SidecarVersion string            `json:"sidecarVersion"`
	Postgres       map[string]string `json:"postgres"` // server_version, the settings that decide durability, and those the run was given
	// Citus is the cluster a run with --citus was on; Postgres is then its
	// coordinator's.
	Citus *CitusConditions `json:"citus,omitempty"`
}

// CitusConditions are the Citus cluster as its coordinator knows it: a
// worker more or fewer, or another shard count, spreads the same traffic
// differently.
type CitusConditions struct {
	Version string `json:"version"` // of the extension, e.g. 13.2.2
	Workers int    `json:"workers"`
	Shards  int    `json:"shards"` // of queenside.partitions; every distributed table is co-located with it
}

// postgresSettings are read from the server: what a commit costs and
// whether it survives an immediate stop.
var postgresSettings = []string{"server_version", "fsync", "synchronous_commit", "full_page_writes", "wal_level", "shared_buffers", "max_connections"}

// given are the names of the settings the run was given, read back too.
func conditions(ctx context.Context, cl *cluster, given []string) Conditions {
	c := Conditions{GoVersion: runtime.Version(), OSArch: runtime.GOOS + "/" + runtime.GOARCH,
		SidecarVersion: cl.version, Postgres: map[string]string{}}
	c.Cores, c.CPUModel = cpuInfo()
	c.MemoryBytes = memTotal()
	c.OS = osRelease()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if conn, err := pgx.Connect(ctx, cl.dbURL); err == nil {
		defer conn.Close(context.Background())
		for _, name := range append(append([]string(nil), postgresSettings...), given...) {
			var v string
			if conn.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v) == nil {
				c.Postgres[name] = v
			}
		}
		if cl.citus != nil {
			c.Citus = citusConditions(ctx, conn)
		}
	}
	return c
}

// citusConditions reads the Citus version, the active workers and the
// shards of the schema from the coordinator; what cannot be read stays
// empty.
func citusConditions(ctx context.Context, conn *pgx.Conn) *CitusConditions {
	var ct CitusConditions
	var version string
	if conn.QueryRow(ctx, "SELECT citus_version()").Scan(&version) == nil {
		// "Citus 13.2.2 on x86_64-pc-linux-gnu, compiled by ..."
		if f := strings.Fields(version); len(f) > 1 {
			ct.Version = f[1]
		}
	}
	const workers = "SELECT count(*) FROM pg_dist_node WHERE groupid <> 0 AND noderole = 'primary' AND isactive"
	conn.QueryRow(ctx, workers).Scan(&ct.Workers) //nolint:errcheck // unread, it stays 0
	const shards = "SELECT count(*) FROM pg_dist_shard WHERE logicalrelid = $1::regclass"
	conn.QueryRow(ctx, shards, schema.Name+".partitions").Scan(&ct.Shards) //nolint:errcheck // unread, it stays 0
	return &ct
}

func cpuInfo() (cores int, model string) {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.NumCPU(), ""
	}
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
	return cores, model
}

func memTotal() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func osRelease() string {
	b, err := os.ReadFile("/etc/os-release")
	if err != nil {
		return ""
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "PRETTY_NAME="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}
