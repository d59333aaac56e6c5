package pgserver

import (
	"io"
	"os"
	"strings"
)

// logTailBytes bounds how much of the server log goes into an error: enough
// for the FATAL line and its context, not a screenful of history.
const logTailBytes = 4096

// logSize returns the current size of the log file, so that after a failed
// start we can show only what this attempt wrote, not earlier runs' output
// (the dev cluster's log accumulates across runs).
func logSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// logTail returns the last lines written to the log after offset from.
func logTail(path string, from int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	if fi.Size() < from { // truncated or replaced: show its end
		from = 0
	}
	if fi.Size()-from > logTailBytes {
		from = fi.Size() - logTailBytes
	}
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return ""
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
