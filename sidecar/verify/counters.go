package verify

import (
	"fmt"
	"sort"
	"sync"
)

// counters counts named events from many goroutines: retries by error
// code, outcomes of steps. Unexpected errors keep a few samples.
type counters struct {
	mu      sync.Mutex
	n       map[string]int64
	samples []string
}

const maxSamples = 20

func newCounters() *counters { return &counters{n: map[string]int64{}} }

func (c *counters) add(name string, n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[name] += n
}

// sample keeps the text of an unexpected error, the first few of them.
func (c *counters) sample(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.samples) < maxSamples {
		c.samples = append(c.samples, fmt.Sprintf(format, args...))
	}
}

func (c *counters) snapshot() (map[string]int64, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int64, len(c.n))
	for k, v := range c.n {
		out[k] = v
	}
	return out, append([]string(nil), c.samples...)
}

// sortedKeys gives a map's keys in order, for stable printing.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
