package spool

import (
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Options tune a Spool. The zero value is ready to use.
type Options struct {
	MaxBytes     int64            // bound on the bytes of all segment files; 0 means 1 GiB
	SegmentBytes int64            // rotate the active segment past this size; 0 means 64 MiB
	FS           FS               // nil means the real filesystem (OSFS)
	Logger       hclog.Logger     // nil means hclog.NewNullLogger()
	Now          func() time.Time // nil means time.Now
}

const (
	defaultMaxBytes     = 1 << 30
	defaultSegmentBytes = 64 << 20
)

// Stats is the spool's size, for health checks. It is kept in memory.
//
// Oldest is the earliest, over the segments, of the append time of each
// segment's first record not yet replayed. Append times within a segment
// grow with the clock, so this is the oldest record unless the clock was
// stepped back; keeping it exact would need a time per record in memory.
type Stats struct {
	Records  int64     // records not yet replayed
	Bytes    int64     // bytes of all segment files, the active one included
	Oldest   time.Time // append time of the oldest record not yet replayed; zero when none
	Segments int       // segment files, the active one included
}

// Recovery is what Open (or one Adopt) found and did.
type Recovery struct {
	Segments    int      // segments kept
	Records     int      // records not yet replayed in them
	TornTails   []string // segments whose torn tail was cut off
	Quarantined []string // where files that did not verify now are, in quarantine/
	// Damaged are the stretches of damaged bytes that no record kept
	// covers: each held at least one record, lost to the replay.
	Damaged []Damage
}

// Damage is a stretch of a segment's bytes that does not verify.
type Damage struct {
	Quarantined string // the original segment, in quarantine/
	Offset      int64  // where the damage starts in it
	Bytes       int64
	// Data is what follows the damaged record's header, up to
	// maxDamageData bytes: its record's data, when only the header was
	// damaged, for the caller to name what was lost.
	Data []byte
}

// maxDamageData bounds Damage.Data.
const maxDamageData = 1 << 20

// Spool is a directory of segment files. All its methods are safe for
// concurrent use.
type Spool struct {
	dir      string
	opts     Options
	fs       FS
	log      hclog.Logger
	now      func() time.Time
	recovery Recovery // what Open found; never changed after

	// adminMu serializes the replay side (MarkReplayed, Retire, Adopt,
	// Quarantine), whose steps on disk must not interleave.
	adminMu sync.Mutex

	// writeMu owns the active segment and the write buffer. The flusher
	// holds it for a whole group commit, Seal and Close to seal.
	writeMu sync.Mutex
	active  *activeSegment
	wbuf    []byte

	// mu guards the fields below. It is held only briefly and never over
	// I/O, so that Stats and Append never wait for a disk. Lock order:
	// adminMu, then writeMu, then mu.
	mu           sync.Mutex
	closed       bool
	pending      []*appendReq
	sealed       map[uint64]*segState
	nextSeq      uint64
	bytes        int64
	records      int64
	hasActive    bool
	activeOldest time.Time

	wake        chan struct{} // a pending Append or Close for the flusher; buffered 1
	closing     chan struct{} // closed by Close
	flusherDone chan struct{}
}

// Open recovers the spool in dir, creating it if needed, by the procedure
// of README.md, and starts the flusher goroutine. Every segment found is
// sealed; the first Append starts a new one.
func Open(dir string, opts Options) (*Spool, error) {
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = defaultMaxBytes
	}
	if opts.SegmentBytes <= 0 {
		opts.SegmentBytes = defaultSegmentBytes
	}
	if opts.FS == nil {
		opts.FS = OSFS
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &Spool{
		dir:         dir,
		opts:        opts,
		fs:          opts.FS,
		log:         opts.Logger,
		now:         opts.Now,
		sealed:      make(map[uint64]*segState),
		nextSeq:     1,
		wake:        make(chan struct{}, 1),
		closing:     make(chan struct{}),
		flusherDone: make(chan struct{}),
	}
	if err := s.recover(); err != nil {
		return nil, err
	}
	go s.flushLoop()
	return s, nil
}

// Dir is the spool directory.
func (s *Spool) Dir() string { return s.dir }

// Recovery reports what Open found.
func (s *Spool) Recovery() Recovery { return s.recovery }

// Stats reports the spool's size without touching the disk.
func (s *Spool) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{Records: s.records, Bytes: s.bytes, Segments: len(s.sealed), Oldest: s.activeOldest}
	if s.hasActive {
		st.Segments++
	}
	for _, seg := range s.sealed {
		if !seg.oldest.IsZero() && (st.Oldest.IsZero() || seg.oldest.Before(st.Oldest)) {
			st.Oldest = seg.oldest
		}
	}
	return st
}

// Close answers every pending Append, stops the flusher, waits for a
// running MarkReplayed, Retire, Adopt or Quarantine, and closes the active
// segment. Every later call returns ErrClosed.
func (s *Spool) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.closed = true
	close(s.closing)
	s.mu.Unlock()
	s.signalFlusher()
	<-s.flusherDone

	s.adminMu.Lock()
	defer s.adminMu.Unlock()
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	if s.active == nil {
		return nil
	}
	// Every record in it was fsynced before its Append returned; the close
	// only releases the file.
	a := s.active
	s.active = nil
	if err := a.f.Close(); err != nil {
		return opErr("close", segName(a.seq), err)
	}
	return nil
}

// isClosed reports whether Close has begun.
func (s *Spool) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}
