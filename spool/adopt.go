package spool

import (
	"fmt"
	"path/filepath"
)

// Adopt takes in a segment file from elsewhere, such as a dead pod's spool,
// as the newest sealed segment. path must be on the spool's filesystem
// (incoming/ is). The file is renamed to <dir>/<new seq>.seg, both
// directories fsynced, and then checked by the same rules as at Open: a
// torn tail is cut, a segment with bad records is rescued and its original
// quarantined. A file whose header does not verify ends in quarantine/
// and Adopt returns ErrNotSegment. A crash part way is finished by the next
// Open, which sees an ordinary segment.
//
// Its progress file, if it had one, is not adopted: every record of it is
// replayed.
func (s *Spool) Adopt(path string) (Segment, Recovery, error) {
	s.adminMu.Lock()
	defer s.adminMu.Unlock()
	if s.isClosed() {
		return Segment{}, Recovery{}, ErrClosed
	}
	inDir, err := sameDir(path, s.dir)
	if err != nil {
		return Segment{}, Recovery{}, fmt.Errorf("spool: adopt %s: %w", path, err)
	}
	if inDir {
		// Renaming one of its own segments would leave it known twice.
		return Segment{}, Recovery{}, fmt.Errorf("spool: adopt %s: already in the spool directory", path)
	}
	s.mu.Lock()
	seq := s.nextSeq
	s.nextSeq++
	s.mu.Unlock()

	origin := filepath.Base(path)
	if err := renameDurable(s.fs, path, filepath.Join(s.dir, segName(seq))); err != nil {
		return Segment{}, Recovery{}, fmt.Errorf("%w (adopting %s)", err, path)
	}
	st, rep, err := s.recoverSegment(seq, origin)
	if err != nil {
		return Segment{}, rep, fmt.Errorf("%w (adopting %s)", err, path)
	}
	if st == nil {
		return Segment{}, rep, fmt.Errorf("%w: %s: its header does not verify; moved to %s", ErrNotSegment, path, rep.Quarantined[0])
	}
	seg := st.segment()
	s.addSealed(st)
	s.log.Info("adopted segment", "origin", path, "path", seg.Path, "records", seg.Records,
		"torn_tails", len(rep.TornTails), "quarantined", len(rep.Quarantined))
	return seg, rep, nil
}

// sameDir reports whether file is directly inside dir.
func sameDir(file, dir string) (bool, error) {
	a, err := filepath.Abs(filepath.Dir(file))
	if err != nil {
		return false, err
	}
	b, err := filepath.Abs(dir)
	if err != nil {
		return false, err
	}
	return a == b, nil
}
