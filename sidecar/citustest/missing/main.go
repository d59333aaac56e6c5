// Command missing prints why the Citus tests cannot run on this machine,
// or nothing when they can: `make test-citus` says so in one line and
// skips rather than run the suites on a cluster it cannot start.
package main

import (
	"fmt"

	"github.com/queenside/queenside/sidecar/citustest"
)

func main() { fmt.Print(citustest.Missing()) }
