package verify

import (
	"fmt"
	"strings"
)

// figuresText puts a fault's figures in words: what the pushes went
// through, how soon the spools drained and the locks went; "" for a fault
// without figures (a consumer fault, or one that was skipped).
func figuresText(r *FaultRecord) string {
	var parts []string
	if r.MaxPushWait != nil && r.Buffered != nil {
		parts = append(parts, fmt.Sprintf("the longest push waited %.2f s for its answer, %d items answered buffered", *r.MaxPushWait, *r.Buffered))
	}
	if r.SpoolsDrained != nil {
		parts = append(parts, fmt.Sprintf("spools drained %.1f s after %s", *r.SpoolsDrained, answeringAgain(r.Kind)))
	}
	if r.LocksFree != nil {
		parts = append(parts, fmt.Sprintf("locks free %.1f s after %s (%s)", *r.LocksFree, lockProbeFrom(r.Kind), r.LockProbe))
	}
	return strings.Join(parts, "; ")
}

// figuresSuffix is figuresText for the end of a progress line.
func figuresSuffix(r *FaultRecord) string {
	if t := figuresText(r); t != "" {
		return "; " + t
	}
	return ""
}

// answeringAgain names the moment the database answers again after a
// fault of kind k, which SpoolsDrained counts from.
func answeringAgain(k FaultKind) string {
	switch k {
	case FaultPostgresStall, FaultWorkerStall:
		return "the thaw"
	case FaultPartition:
		return "the link came back"
	}
	return "the restart"
}

// lockProbeFrom names the moment LocksFree counts from: a partition's
// sidecar holds its locks from the cut on, a frozen server can free none
// before the thaw.
func lockProbeFrom(k FaultKind) string {
	if k == FaultPartition {
		return "the cut"
	}
	return "the thaw"
}
