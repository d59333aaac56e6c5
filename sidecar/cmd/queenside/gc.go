package main

import (
	"os"
	"runtime/debug"
)

// tuneGC trades memory the sidecar has to spare for CPU it has not: with
// Go's default the collector ran so often that it took a third of the
// sidecar's CPU under load. A collection now waits for the heap to grow
// fivefold, and the soft limit brings collections back as the heap nears
// 48 MiB, which keeps the process well under 64 MB. GOGC and GOMEMLIMIT, when
// set, win.
func tuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(48 << 20)
	}
}
