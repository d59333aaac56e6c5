package spool

import (
	"fmt"
	"time"
)

// appendReq is one Append waiting for the flusher.
type appendReq struct {
	buf     []byte    // its records, encoded
	records int       // how many
	at      time.Time // their append time
	done    chan error
}

// Append writes records to the active segment and returns nil only once all
// of them are fsynced. It is all or nothing: on error, none of them is
// spooled (but see README.md, Limits, for a failed truncate).
//
// Concurrent Appends share one write and one fsync: the flusher takes every
// pending Append, writes them together and answers them all. A write or
// fsync error reaches every Append of that group; the segment is truncated
// back and sealed, and the next Append goes to a new segment.
//
// It returns ErrFull when the records do not fit under Options.MaxBytes,
// and ErrRecordSize for an empty record or one over MaxRecordBytes.
func (s *Spool) Append(records [][]byte) error {
	if err := checkRecordSizes(records); err != nil {
		return err
	}
	if len(records) == 0 {
		if s.isClosed() {
			return ErrClosed
		}
		return nil
	}
	// Rounded through nanoseconds, so it equals what Read returns.
	at := time.Unix(0, s.now().UnixNano())
	req := &appendReq{
		buf:     encodeRecords(records, at.UnixNano()),
		records: len(records),
		at:      at,
		done:    make(chan error, 1),
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.pending = append(s.pending, req)
	s.mu.Unlock()
	s.signalFlusher()
	return <-req.done
}

// signalFlusher wakes the flusher. The channel holds one signal, so a
// signal sent while one is already waiting is not needed and is dropped.
func (s *Spool) signalFlusher() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// flushLoop is the flusher goroutine. While it writes and fsyncs one
// group, the Appends that arrive meanwhile queue up and become the next
// group: the slower the disk, the larger the groups. After Close it answers
// what is pending and stops.
func (s *Spool) flushLoop() {
	defer close(s.flusherDone)
	for {
		s.mu.Lock()
		reqs, closed := s.pending, s.closed
		s.pending = nil
		s.mu.Unlock()
		if len(reqs) > 0 {
			s.commit(reqs)
			continue
		}
		if closed {
			return
		}
		<-s.wake
	}
}

// commit writes reqs, in order, and answers each of them.
func (s *Spool) commit(reqs []*appendReq) {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	for len(reqs) > 0 {
		reqs = s.commitSegment(reqs)
	}
}

// commitSegment writes the requests at the front of reqs that fit in the
// active segment with one write and one fsync, answers ErrFull to those
// that do not fit under MaxBytes, and returns the rest for a new segment.
func (s *Spool) commitSegment(reqs []*appendReq) []*appendReq {
	if a := s.active; a != nil && a.records > 0 && a.size+int64(len(reqs[0].buf)) > s.opts.SegmentBytes {
		s.sealActive()
	}
	fresh := s.active == nil
	segSize, segRecords := int64(headerSize), 0
	if !fresh {
		segSize, segRecords = s.active.size, s.active.records
	}
	s.mu.Lock()
	used := s.bytes
	s.mu.Unlock()
	if fresh {
		used += headerSize
	}

	var group []*appendReq
	var n int64
	i := 0
	for ; i < len(reqs); i++ {
		r := reqs[i]
		b := int64(len(r.buf))
		if used+n+b > s.opts.MaxBytes {
			r.done <- fmt.Errorf("%w: %d more bytes would pass the bound of %d (%d in use)", ErrFull, b, s.opts.MaxBytes, used+n)
			continue
		}
		if (len(group) > 0 || segRecords > 0) && segSize+n+b > s.opts.SegmentBytes {
			break
		}
		group = append(group, r)
		n += b
	}
	rest := reqs[i:]
	if len(group) == 0 {
		return rest
	}

	err := s.writeGroup(group, fresh)
	for _, r := range group {
		r.done <- err
	}
	return rest
}

// writeGroup writes a group into the active segment, creating it first if
// fresh, and fsyncs it.
func (s *Spool) writeGroup(group []*appendReq, fresh bool) error {
	if fresh {
		if err := s.openActive(); err != nil {
			return err
		}
	}
	buf := group[0].buf
	if len(group) > 1 {
		s.wbuf = s.wbuf[:0]
		for _, r := range group {
			s.wbuf = append(s.wbuf, r.buf...)
		}
		buf = s.wbuf
	}
	defer func() {
		// Do not pin the memory of one huge group for the life of the spool.
		if cap(s.wbuf) > 8<<20 {
			s.wbuf = nil
		}
	}()
	if err := s.writeActive(buf); err != nil {
		return err
	}
	records := 0
	for _, r := range group {
		records += r.records
	}
	s.activeWritten(int64(len(buf)), records, group[0].at)
	return nil
}
