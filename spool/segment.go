package spool

import "time"

// Segment is a sealed segment, as the replayer sees it.
type Segment struct {
	Seq     uint64
	Path    string
	Records int   // records not yet replayed
	Bytes   int64 // size of the file
}

// Record is one record read back from a sealed segment.
type Record struct {
	Data []byte    // the caller's to keep
	At   time.Time // when it was appended
	End  int64     // byte offset just past it: what MarkReplayed takes
}

// segState is the spool's knowledge of one sealed segment. Every record
// from headerSize to end verifies; bytes past end (only after a failed
// truncate) are never read.
type segState struct {
	seq      uint64
	path     string
	end      int64     // just past the last record that verifies
	size     int64     // the file's size, counted in Stats.Bytes
	progress int64     // where the first record not yet replayed starts
	records  int       // records not yet replayed
	oldest   time.Time // append time of the first record not yet replayed; zero when none
}

func (st *segState) segment() Segment {
	return Segment{Seq: st.seq, Path: st.path, Records: st.records, Bytes: st.size}
}
