package spool

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
)

const (
	// incomingRescan is how often incoming/ is listed even without an
	// event: inotify can overflow, and some volumes send no events.
	incomingRescan = 2 * time.Second
	// incomingSettle is how long a file in incoming/ must go unmodified
	// before it is adopted, a guard against a copy written straight under
	// a ".seg" name (README.md asks for a rename, but kubectl cp does not).
	incomingSettle = time.Second
)

// WatchIncoming adopts every "*.seg" file in incoming/, the ones there now
// and every one that appears, until ctx ends (then it returns nil) or the
// spool is closed (ErrClosed). It calls adopted, if not nil, after each
// adoption, from its own goroutine, with what the adoption's recovery
// found (its damaged records, say). Only names ending in ".seg" are taken,
// so an operator copies under another name and renames; a file modified
// less than a second ago waits for a later scan. A file that is not a
// segment at all is moved to quarantine/; one that fails for another
// reason stays and is tried again at the next scan.
func (s *Spool) WatchIncoming(ctx context.Context, adopted func(Segment, Recovery)) error {
	if s.isClosed() {
		return ErrClosed
	}
	dir := s.incomingDir()
	var events <-chan fsnotify.Event
	var watchErrs <-chan error
	w, err := fsnotify.NewWatcher()
	if err == nil {
		if err = w.Add(dir); err != nil {
			w.Close()
		}
	}
	if err != nil {
		s.log.Warn("cannot watch incoming/; listing it every few seconds instead", "dir", dir, "error", err)
	} else {
		defer w.Close()
		events, watchErrs = w.Events, w.Errors
	}
	tick := time.NewTicker(incomingRescan)
	defer tick.Stop()

	failed := make(map[string]string) // path → last error logged, to log each once
	var settled <-chan time.Time
	scan := true
	for {
		if scan {
			wait, err := s.adoptIncoming(adopted, failed)
			if err != nil {
				return err
			}
			if wait > 0 {
				settled = time.After(wait)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.closing:
			return ErrClosed
		case ev, ok := <-events:
			if !ok {
				events = nil
			}
			// Writes to a ".part" file being copied in are no reason to
			// list the directory; a rename to ".seg" is.
			scan = ok && strings.HasSuffix(ev.Name, segExt)
		case err, ok := <-watchErrs:
			if !ok {
				watchErrs = nil
			} else {
				s.log.Warn("watching incoming/", "error", err)
			}
			scan = false
		case <-tick.C:
			scan = true
		case <-settled:
			scan = true
		}
	}
}

// adoptIncoming adopts the "*.seg" files of incoming/ in name order. It
// returns how long until the next file still settling may be taken (0 when
// none waits), and ErrClosed once the spool is closed.
func (s *Spool) adoptIncoming(adopted func(Segment, Recovery), failed map[string]string) (time.Duration, error) {
	dir := s.incomingDir()
	entries, err := s.fs.ReadDir(dir)
	if err != nil {
		s.log.Warn("cannot list incoming/", "dir", dir, "error", err)
		return 0, nil
	}
	var wait time.Duration
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), segExt) {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // gone since the listing
		}
		// File times come from the real clock, not Options.Now.
		if age := time.Since(info.ModTime()); age < incomingSettle {
			if w := incomingSettle - age; wait == 0 || w < wait {
				wait = w
			}
			continue
		}
		path := filepath.Join(dir, e.Name())
		seg, rep, err := s.Adopt(path)
		switch {
		case errors.Is(err, ErrClosed):
			return 0, err
		case errors.Is(err, ErrNotSegment):
			// Adopt logged it at error level and moved it to quarantine/.
		case errors.Is(err, fs.ErrNotExist) && !s.exists(path):
			// Taken since the listing, by another WatchIncoming or Adopt.
		case err != nil:
			if failed[path] != err.Error() {
				s.log.Error("cannot adopt; left in incoming/ and tried again at the next scan", "path", path, "error", err)
				failed[path] = err.Error()
			}
		default:
			delete(failed, path)
			if adopted != nil {
				adopted(seg, rep)
			}
		}
	}
	return wait, nil
}

// exists reports whether path is still there.
func (s *Spool) exists(path string) bool {
	f, err := s.fs.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return !errors.Is(err, fs.ErrNotExist)
	}
	f.Close()
	return true
}
