package spool

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// File names in the spool directory. A segment is named by its sequence,
// zero-padded to 20 digits (every uint64 fits), so that sorting names sorts
// segments oldest first.
const (
	segExt         = ".seg"
	progressExt    = ".progress"
	rescueExt      = ".rescue"
	tmpExt         = ".tmp"
	tornExt        = ".torn"
	quarantineDir  = "quarantine"
	incomingDir    = "incoming"
	seqDigits      = 20
	quarantineTime = "20060102T150405Z"
)

func seqStem(seq uint64) string { return fmt.Sprintf("%0*d", seqDigits, seq) }

func segName(seq uint64) string      { return seqStem(seq) + segExt }
func progressName(seq uint64) string { return seqStem(seq) + progressExt }
func rescueName(seq uint64) string   { return seqStem(seq) + rescueExt }

// fileKind is what a name in the spool directory is.
type fileKind int

const (
	kindUnknown     fileKind = iota
	kindSegment              // <seq>.seg
	kindSegmentTmp           // <seq>.seg.tmp
	kindProgress             // <seq>.progress
	kindProgressTmp          // <seq>.progress.tmp
	kindRescue               // <seq>.rescue
	kindRescueTmp            // <seq>.rescue.tmp
)

var kindSuffixes = []struct {
	suffix string
	kind   fileKind
}{
	// Longer suffixes first, so ".seg.tmp" is not read as ".tmp" of "<seq>.seg".
	{segExt + tmpExt, kindSegmentTmp},
	{progressExt + tmpExt, kindProgressTmp},
	{rescueExt + tmpExt, kindRescueTmp},
	{segExt, kindSegment},
	{progressExt, kindProgress},
	{rescueExt, kindRescue},
}

// parseName tells which spool file name is and of which sequence. Names the
// spool did not make, such as an operator's "x.seg", are kindUnknown.
func parseName(name string) (uint64, fileKind) {
	for _, ks := range kindSuffixes {
		stem, ok := strings.CutSuffix(name, ks.suffix)
		if !ok {
			continue
		}
		if len(stem) != seqDigits || strings.Trim(stem, "0123456789") != "" {
			return 0, kindUnknown
		}
		seq, err := strconv.ParseUint(stem, 10, 64)
		if err != nil {
			return 0, kindUnknown
		}
		return seq, ks.kind
	}
	return 0, kindUnknown
}

// label turns a file name or a caller's name into the stem of a quarantine
// file: no directory, no ".seg", never empty.
func label(name string) string {
	base := strings.TrimSuffix(filepath.Base(name), segExt)
	if base == "" || base == "." || base == ".." || base == string(filepath.Separator) {
		return "segment"
	}
	return base
}
