package verify

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// fillSpoolDisk is FaultSpoolDiskFull.
func (in *injector) fillSpoolDisk(ctx context.Context, r *FaultRecord) error {
	i := in.rng.IntN(len(in.cl.sidecars))
	s, volume := in.cl.sidecars[i], in.cl.volumes[i]
	r.Target = s.String()
	o, err := in.stopPostgres()
	if err != nil {
		return err
	}
	filler := filepath.Join(volume, "filler")
	defer os.Remove(filler) // on every path: the run goes on with room
	if !sleep(ctx, in.cfg.PGDown/3) {
		o.end(ctx) //nolint:errcheck // the run is ending
		return ctx.Err()
	}
	s.sample(ctx) //nolint:errcheck // a failed sample keeps the last one
	spooled := s.current().Records
	written, err := fill(filler)
	if err != nil {
		o.end(ctx) //nolint:errcheck // the fill's error says more
		return err
	}
	room := freeBytes(volume)
	began, err := o.end(ctx)
	if err != nil {
		return err
	}
	// Killed as it replays (if it is caught at it), and started again on
	// the full volume: what it committed and could not note on disk must
	// not be stored twice.
	caught := in.watchReplaying(ctx, s)
	bounced, err := in.bounce(ctx, s, syscall.SIGKILL, false)
	if err != nil {
		return err
	}
	if err := in.awaitReplay(ctx); err != nil {
		return err
	}
	r.SpoolsDrained = seconds(time.Since(began))
	left := freeBytes(volume)
	if err := os.Remove(filler); err != nil {
		return fmt.Errorf("free the spool volume: %w", err)
	}
	r.Detail = fmt.Sprintf("PostgreSQL stopped; %.1f s in, with %d records in its spool, its volume filled (%d MiB written, %d bytes left); "+
		"PostgreSQL started again after %v; SIGKILLed %s and %s; every spool replayed with the volume still full (%d bytes free), then the filler removed",
		(in.cfg.PGDown / 3).Seconds(), spooled, written>>20, room, in.cfg.PGDown, caught, bounced, left)
	return nil
}

// fill writes path until its filesystem has no room, and returns the
// bytes written.
func fill(path string) (int64, error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	var n int64
	for {
		w, err := f.Write(chunk)
		n += int64(w)
		if errors.Is(err, syscall.ENOSPC) {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("fill the spool volume: %w", err)
		}
	}
}

func freeBytes(dir string) int64 {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return -1
	}
	return int64(st.Bavail) * st.Bsize
}

// watchReplaying waits up to replayWatch for s to be seen replaying, and
// says whether it was.
func (in *injector) watchReplaying(ctx context.Context, s *sidecar) string {
	deadline := time.Now().Add(replayWatch)
	for time.Now().Before(deadline) {
		if c, err := scrapeSpool(ctx, s.httpAddr); err == nil && c.Replaying && c.Records > 0 {
			return fmt.Sprintf("while it replayed %d records", c.Records)
		}
		if !sleep(ctx, 20*time.Millisecond) {
			break
		}
	}
	return "after its replay (not caught replaying)"
}

// damageSpool is FaultSpoolDamage.
func (in *injector) damageSpool(ctx context.Context, r *FaultRecord) error {
	o, err := in.stopPostgres()
	if err != nil {
		return err
	}
	if !sleep(ctx, in.cfg.PGDown/2) {
		o.end(ctx) //nolint:errcheck // the run is ending
		return ctx.Err()
	}
	s, seen := in.replayingSidecar(ctx, false)
	r.Target = s.String()
	if _, _, err := s.stop(ctx, syscall.SIGKILL); err != nil {
		o.end(ctx) //nolint:errcheck // the stop's error says more
		return err
	}
	what, err := damageRecord(s.spoolDir)
	if err != nil {
		s.start(ctx, true) //nolint:errcheck // the damage's error says more
		o.end(ctx)         //nolint:errcheck
		return err
	}
	logFrom := fileSize(s.logPath)
	if _, err := s.start(ctx, true); err != nil {
		o.end(ctx) //nolint:errcheck // the start's error says more
		return err
	}
	began, err := o.end(ctx)
	if err != nil {
		return err
	}
	if err := in.awaitReplay(ctx); err != nil {
		return err
	}
	r.SpoolsDrained = seconds(time.Since(began))
	lost, err := reportedLosses(s.logPath, logFrom)
	if err != nil {
		return err
	}
	r.ReportedLost = lost
	r.Detail = fmt.Sprintf("PostgreSQL stopped; SIGKILLed with %d records in its spool, %s, and started again; it reported %d record(s) lost by name: %s",
		seen.Records, what, len(lost), strings.Join(lostNames(lost), ", "))
	if len(lost) == 0 {
		return errors.New("the damaged record was not reported lost")
	}
	return nil
}

// damageRecord sets the length of the middle record of the largest
// segment in dir to 0xFFFFFF, a length no record the spool wrote has
// (spool/README.md, the on-disk format), and says which.
func damageRecord(dir string) (string, error) {
	segs, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	if err != nil {
		return "", err
	}
	var path string
	var size int64
	for _, p := range segs {
		if fi, err := os.Stat(p); err == nil && fi.Size() > size {
			path, size = p, fi.Size()
		}
	}
	if path == "" {
		return "", errors.New("no spool segment to damage")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	const header, recordHeader = 24, 16
	var starts []int
	for off := header; off+recordHeader <= len(b); {
		n := int(binary.LittleEndian.Uint32(b[off:]))
		if n == 0 || off+recordHeader+n > len(b) {
			break // a torn tail
		}
		starts = append(starts, off)
		off += recordHeader + n
	}
	if len(starts) < 3 {
		return "", fmt.Errorf("%s holds %d records: too few to damage one in the middle", path, len(starts))
	}
	k := len(starts) / 2
	binary.LittleEndian.PutUint32(b[starts[k]:], 0xFFFFFF)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return "", err
	}
	return fmt.Sprintf("the length of record %d of %d in %s set to 0xFFFFFF", k, len(starts), filepath.Base(path)), nil
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// LostEvent is an event a sidecar reported lost to a damaged spool record.
type LostEvent struct {
	Queue     int    `json:"queue"` // 1-based, as the auditors number them
	Partition string `json:"partition"`
	Seq       int64  `json:"seq"`
}

// lossLine is what the sidecar logs at ERROR for a damaged record whose
// data still reads (buffer.reportDamage).
var lossLine = regexp.MustCompile(`\[ERROR\].*is lost to the replay.* queue=verify-\S+-q(\d+) partition=(p\d+) transaction_id=q\d+\.(\d+)`)

// reportedLosses reads the losses a sidecar's log reports from offset on.
func reportedLosses(logPath string, offset int64) ([]LostEvent, error) {
	f, err := os.Open(logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	var lost []LostEvent
	for _, line := range strings.Split(string(b), "\n") {
		m := lossLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		q, _ := strconv.Atoi(m[1])
		seq, _ := strconv.ParseInt(m[3], 10, 64)
		e := LostEvent{Queue: q, Partition: m[2], Seq: seq}
		if !slices.Contains(lost, e) {
			lost = append(lost, e)
		}
	}
	return lost, nil
}

func lostNames(lost []LostEvent) []string {
	out := make([]string, len(lost))
	for i, e := range lost {
		out[i] = fmt.Sprintf("queue %d %s #%d", e.Queue, e.Partition, e.Seq)
	}
	return out
}
