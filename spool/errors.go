package spool

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

var (
	// ErrFull is returned by an Append that does not fit under
	// Options.MaxBytes. Nothing of that Append was written.
	ErrFull = errors.New("spool: full")
	// ErrClosed is returned by every method after Close.
	ErrClosed = errors.New("spool: closed")
	// ErrRecordSize is returned for an empty record or one over
	// MaxRecordBytes; nothing of that call was written.
	ErrRecordSize = errors.New("spool: record size out of range (1 byte to 64 MiB)")
	// ErrNoSegment is returned for a segment that is not sealed: unknown,
	// retired, or still the active one.
	ErrNoSegment = errors.New("spool: no such sealed segment")
	// ErrNotReplayed is returned by Retire while the segment still holds
	// records not marked replayed.
	ErrNotReplayed = errors.New("spool: segment not fully replayed")
	// ErrCorrupt is returned by Read when a record of a sealed segment no
	// longer verifies: the disk changed under the spool since Open. The next
	// Open quarantines the segment and keeps every record that verifies.
	ErrCorrupt = errors.New("spool: record does not verify")
	// ErrNotSegment is returned by Adopt for a file whose header does not
	// verify; the file has been moved to quarantine/.
	ErrNotSegment = errors.New("spool: not a segment")
)

// opErr says which operation failed on which file, in the spool's words
// ("spool: fsync 00000000000000000001.seg: input/output error"). The
// path inside an *os.PathError would repeat the file name, so only its
// cause is kept; errors.Is on the errno still works.
func opErr(op, name string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		err = le.Err
	}
	return fmt.Errorf("spool: %s %s: %w", op, name, err)
}
