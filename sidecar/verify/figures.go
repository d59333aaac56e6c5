package verify

import (
	"fmt"
	"strings"
)

// figuresText puts a fault's figures in words: what the pushes went
// through and how soon the spools drained; "" for a fault without
// figures (a consumer fault).
func figuresText(r *FaultRecord) string {
	var parts []string
	if r.MaxPushWait != nil && r.Buffered != nil {
		parts = append(parts, fmt.Sprintf("the longest push waited %.2f s for its answer, %d items answered buffered", *r.MaxPushWait, *r.Buffered))
	}
	if r.SpoolsDrained != nil {
		parts = append(parts, fmt.Sprintf("spools drained %.1f s after the restart", *r.SpoolsDrained))
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
