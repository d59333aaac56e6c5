package spool

import (
	"errors"
	"io/fs"
	"path/filepath"
	"slices"
)

// seqFiles is which files of one sequence are in the spool directory.
type seqFiles struct {
	seg, segTmp, progress, progressTmp, rescue, rescueTmp bool
}

// recover runs the recovery procedure of README.md ("Recovery on Open") on
// the spool directory. It stops at the first I/O error, leaving the files
// as they are at that step for the next Open to take up.
func (s *Spool) recover() error {
	if err := s.makeDirs(); err != nil { // step 1
		return err
	}
	if err := s.removeQuarantineTemps(); err != nil { // step 2
		return err
	}
	files, maxSeq, err := s.listFiles()
	if err != nil {
		return err
	}
	seqs := make([]uint64, 0, len(files))
	for seq := range files {
		seqs = append(seqs, seq)
	}
	slices.Sort(seqs)
	for _, seq := range seqs { // step 3
		if err := s.resolveTemps(seq, files[seq]); err != nil {
			return err
		}
	}
	for _, seq := range seqs { // step 4
		if !files[seq].seg {
			continue
		}
		st, rep, err := s.recoverSegment(seq, seqStem(seq))
		if err != nil {
			return err
		}
		s.recovery.TornTails = append(s.recovery.TornTails, rep.TornTails...)
		s.recovery.Quarantined = append(s.recovery.Quarantined, rep.Quarantined...)
		s.recovery.Damaged = append(s.recovery.Damaged, rep.Damaged...)
		if st != nil {
			s.addSealed(st)
			s.recovery.Segments++
			s.recovery.Records += st.records
		}
	}
	s.nextSeq = maxSeq + 1 // step 5
	if s.recovery.Segments > 0 || len(s.recovery.Quarantined) > 0 {
		s.log.Info("spool recovered", "dir", s.dir, "segments", s.recovery.Segments,
			"records", s.recovery.Records, "torn_tails", len(s.recovery.TornTails),
			"quarantined", len(s.recovery.Quarantined))
	}
	return nil
}

// makeDirs is step 1: the spool directory and its two subdirectories.
func (s *Spool) makeDirs() error {
	_, err := s.fs.ReadDir(s.dir)
	created := errors.Is(err, fs.ErrNotExist)
	for _, d := range []string{s.dir, s.quarantineDir(), s.incomingDir()} {
		if err := s.fs.MkdirAll(d, dirPerm); err != nil {
			return opErr("create directory", d, err)
		}
	}
	if created {
		// Make the new directory itself durable, not only what is in it.
		if err := syncDir(s.fs, filepath.Dir(filepath.Clean(s.dir))); err != nil {
			return err
		}
	}
	return syncDir(s.fs, s.dir)
}

func (s *Spool) quarantineDir() string { return filepath.Join(s.dir, quarantineDir) }
func (s *Spool) incomingDir() string   { return filepath.Join(s.dir, incomingDir) }

// removeQuarantineTemps is step 2: a quarantine file still named ".tmp" is
// incomplete, and what it copies is still where it came from.
func (s *Spool) removeQuarantineTemps() error {
	entries, err := s.fs.ReadDir(s.quarantineDir())
	if err != nil {
		return opErr("read directory", s.quarantineDir(), err)
	}
	for _, e := range entries {
		if e.IsDir() || filepath.Ext(e.Name()) != tmpExt {
			continue
		}
		s.log.Debug("removing an incomplete quarantine file", "name", e.Name())
		if err := removeDurable(s.fs, filepath.Join(s.quarantineDir(), e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// listFiles sorts the spool directory's files by sequence, and returns the
// highest sequence seen so that no name in use is given out again.
func (s *Spool) listFiles() (map[uint64]*seqFiles, uint64, error) {
	entries, err := s.fs.ReadDir(s.dir)
	if err != nil {
		return nil, 0, opErr("read directory", s.dir, err)
	}
	files := make(map[uint64]*seqFiles)
	var maxSeq uint64
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		seq, kind := parseName(e.Name())
		if kind == kindUnknown {
			s.log.Warn("not a spool file; left alone (segments to adopt go in incoming/)",
				"path", filepath.Join(s.dir, e.Name()))
			continue
		}
		f := files[seq]
		if f == nil {
			f = &seqFiles{}
			files[seq] = f
		}
		switch kind {
		case kindSegment:
			f.seg = true
		case kindSegmentTmp:
			f.segTmp = true
		case kindProgress:
			f.progress = true
		case kindProgressTmp:
			f.progressTmp = true
		case kindRescue:
			f.rescue = true
		case kindRescueTmp:
			f.rescueTmp = true
		}
		maxSeq = max(maxSeq, seq)
	}
	return files, maxSeq, nil
}

// resolveTemps is step 3 for one sequence: every temporary file is either
// incomplete, and removed, or the last step of a rescue, and finished.
func (s *Spool) resolveTemps(seq uint64, f *seqFiles) error {
	path := func(name string) string { return filepath.Join(s.dir, name) }
	segPath, progPath, rescuePath := path(segName(seq)), path(progressName(seq)), path(rescueName(seq))
	var remove []string
	if f.segTmp { // 3.1: a new segment never holds a record before its rename
		remove = append(remove, segPath+tmpExt)
	}
	if f.progressTmp { // 3.2: the previous progress file is intact
		remove = append(remove, progPath+tmpExt)
	}
	if f.rescueTmp { // 3.3: the original has not moved yet
		remove = append(remove, rescuePath+tmpExt)
	}
	if f.rescue && f.seg { // 3.4: the original has not moved; step 4 rescues it again
		remove = append(remove, rescuePath)
	}
	for _, p := range remove {
		s.log.Debug("removing an incomplete temporary file", "path", p)
		if err := removeDurable(s.fs, p); err != nil {
			return err
		}
	}
	if f.rescue && !f.seg { // 3.5: the original is in quarantine/
		s.log.Warn("finishing a rescue a crash interrupted", "path", segPath)
		if err := removeDurable(s.fs, progPath); err != nil {
			return err
		}
		if err := renameDurable(s.fs, rescuePath, segPath); err != nil {
			return err
		}
		f.seg, f.progress = true, false
	}
	if f.progress && !f.seg { // 3.6: its segment is gone
		if err := removeDurable(s.fs, progPath); err != nil {
			return err
		}
		f.progress = false
	}
	return nil
}

// addSealed counts a recovered or adopted segment in the spool.
func (s *Spool) addSealed(st *segState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sealed[st.seq] = st
	s.bytes += st.size
	s.records += int64(st.records)
}
