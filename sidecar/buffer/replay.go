package buffer

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/queenside/queenside/sidecar/store"
	"github.com/queenside/queenside/sidecar/telemetry"
	"github.com/queenside/queenside/spool"
)

const (
	// replayBatch is the number of records per replayed push: large enough
	// to be cheap per record, small enough that live pushes fused beside it
	// wait little.
	replayBatch = 500
	// recheckEvery is how often the replayer looks again without being
	// woken: for PostgreSQL's return, and for records it could not store.
	recheckEvery = time.Second
	// probeTimeout bounds the ping of a suspicion (Suspect), below the
	// database timeout: a server that cannot answer SELECT 1 within it
	// while a push waits is taken for down, and the pushes that follow go
	// to the spool at once rather than each wait the whole timeout.
	probeTimeout = time.Second
)

// Run replays the spool whenever PostgreSQL answers and the schema is ready,
// until ctx ends. It also adopts segments dropped into incoming/.
func (b *Buffer) Run(ctx context.Context, ready func() bool) {
	go func() {
		err := b.sp.WatchIncoming(ctx, func(seg spool.Segment, rep spool.Recovery) {
			b.noteQuarantined(rep.Quarantined...)
			b.reportDamage(rep.Damaged)
			b.passMu.Lock()
			err := b.count(seg)
			b.passMu.Unlock()
			if err != nil {
				b.log.Error("adopted spool segment could not be read", "path", seg.Path, "error", err)
				return
			}
			b.log.Warn("adopted a spool segment from incoming/", "path", seg.Path, "records", seg.Records)
			b.wake()
		})
		if err != nil && ctx.Err() == nil {
			b.log.Error("watching the spool's incoming/ directory failed; adopt segments by restarting", "error", err)
		}
	}()
	t := time.NewTicker(recheckEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.kick:
			if b.down.Load() {
				// Every spooled push kicks; while PostgreSQL is down, only
				// the ticker probes for it, once a second.
				continue
			}
		case <-t.C:
		}
		b.watchWindows(ctx, ready)
		if !ready() {
			continue
		}
		err := b.pass(ctx)
		switch {
		case err == nil || ctx.Err() != nil:
		case store.AsTimeout(err) != nil:
			// PostgreSQL answered the ping, yet a batch was not committed
			// in time: a lock held long, or a Citus worker that does not
			// answer. Its partitions stay held; the next tick tries again.
			b.log.Warn("a replayed batch was not committed in time; will retry", "error", err)
		case errors.Is(err, errProgressUnrecorded):
			// Logged by mark; the next tick tries again, the database
			// taken for up all the while.
		case store.IsUnavailable(err):
			b.MarkDown(err)
		default:
			b.log.Error("spool replay stopped; will retry", "error", err)
		}
	}
}

// pass checks that PostgreSQL answers (marking it down if not), then
// replays every sealed segment, oldest first, retiring each once all of it
// is committed.
func (b *Buffer) pass(ctx context.Context) error {
	suspected, down := b.suspect.Swap(false), b.down.Load()
	if !suspected && !down && b.sp.Stats().Records == 0 {
		return nil
	}
	pctx, cancel := b.st.Bound(ctx)
	if suspected && !down {
		pctx, cancel = probeBound(pctx, cancel)
	}
	_, err := b.st.Ping(pctx)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			b.MarkDown(store.TimedOut(pctx, err))
		}
		return nil
	}
	if b.down.Swap(false) {
		b.log.Info("database reachable again", "spooled", b.sp.Stats().Records)
	}
	if b.sp.Stats().Records == 0 {
		return nil
	}
	b.passMu.Lock()
	defer b.passMu.Unlock()
	if err := b.markUnmarked(); err != nil {
		return err
	}
	b.replaying.Store(true)
	defer b.replaying.Store(false)
	if err := b.sp.Seal(); err != nil {
		return fmt.Errorf("seal the active spool segment: %w", err)
	}
	start, before := time.Now(), b.replayed.Load()
	for _, seg := range b.sp.Sealed() {
		if err := b.replaySegment(ctx, seg); err != nil {
			return err
		}
		if err := b.sp.Retire(seg); err != nil {
			return fmt.Errorf("retire replayed spool segment: %w", err)
		}
	}
	if n := b.replayed.Load() - before; n > 0 {
		b.log.Info("replayed the spool", "records", n, "took", time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// replaySegment pushes a segment's records in batches, marking progress
// after each committed batch so a crash resumes after it.
func (b *Buffer) replaySegment(ctx context.Context, seg spool.Segment) error {
	var batch []store.Message
	var raws [][]byte
	var end int64
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := b.store(ctx, seg, batch, raws); err != nil {
			return err
		}
		// Committed: whether or not the spool can record it, the batch is
		// in the database and no longer holds its partitions.
		keys := make([]partitionKey, len(batch))
		for i, m := range batch {
			keys[i] = partitionKey{m.Queue, m.Partition}
		}
		b.pending.add(keys, -1)
		batch, raws = batch[:0], raws[:0]
		return b.mark(seg, end)
	}
	err := b.sp.Read(seg, func(r spool.Record) error {
		end = r.End
		m, err := decodeRecord(r.Data)
		if err != nil {
			return b.reject(seg, r.Data, err)
		}
		batch, raws = append(batch, m), append(raws, r.Data)
		if len(batch) >= replayBatch {
			return flush()
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := flush(); err != nil {
		return err
	}
	if end > 0 {
		return b.mark(seg, end)
	}
	return nil
}

// unmarkedProgress is how far a segment is replayed, committed to the
// database and not yet recorded by the spool, and why.
type unmarkedProgress struct {
	seg spool.Segment
	end int64
	err error
}

// errProgressUnrecorded is a pass stopped because the spool could not
// record replay progress: the spool's disk, not the database.
var errProgressUnrecorded = errors.New("spool replay progress not recorded")

// mark records that seg is replayed up to end. If the spool cannot (its
// disk is full, say), the progress is kept here and the pass stops: every
// pass first records it (markUnmarked) and replays nothing until it is,
// so that no record is stored twice while the disk refuses writes.
func (b *Buffer) mark(seg spool.Segment, end int64) error {
	if err := b.sp.MarkReplayed(seg, end); err != nil {
		b.unmarked.Store(&unmarkedProgress{seg: seg, end: end, err: err})
		b.log.Error("the spool cannot record its replay progress; replay waits until it can, so that nothing is stored twice",
			"segment", filepath.Base(seg.Path), "error", err)
		return fmt.Errorf("%w: %w", errProgressUnrecorded, err)
	}
	return nil
}

// markUnmarked records the progress mark could not, if any.
func (b *Buffer) markUnmarked() error {
	u := b.unmarked.Load()
	if u == nil {
		return nil
	}
	if err := b.sp.MarkReplayed(u.seg, u.end); err != nil {
		return fmt.Errorf("%w: %w", errProgressUnrecorded, err)
	}
	b.unmarked.Store(nil)
	b.log.Info("the spool recorded its replay progress again; replay goes on", "segment", filepath.Base(u.seg.Path))
	return nil
}

// store pushes one batch. A record already stored (its first attempt
// committed, or a replay before a crash did) comes back a duplicate, which
// counts as done. If the database refuses the batch for what is in it, the
// records are tried one by one, and the ones it refuses are kept in
// quarantine/ rather than replayed forever.
func (b *Buffer) store(ctx context.Context, seg spool.Segment, batch []store.Message, raws [][]byte) (err error) {
	if telemetry.Enabled() {
		// The records keep the headers they were pushed with, so the
		// replay span can link to the traces that pushed them.
		headers := make([][]byte, len(batch))
		for i := range batch {
			headers[i] = batch[i].Headers
		}
		var span trace.Span
		ctx, span = telemetry.StartReplay(ctx, filepath.Base(seg.Path), headers)
		defer func() { telemetry.End(span, err) }()
	}
	pctx, cancel := b.st.Bound(ctx)
	_, err = b.st.PushApart(pctx, batch)
	cancel()
	if err == nil {
		b.replayed.Add(int64(len(batch)))
		return nil
	}
	if store.IsUnavailable(err) || ctx.Err() != nil {
		return err
	}
	for i := range batch {
		pctx, cancel := b.st.Bound(ctx)
		_, err := b.st.PushApart(pctx, batch[i:i+1])
		cancel()
		switch {
		case err == nil:
			b.replayed.Add(1)
		case store.IsUnavailable(err) || ctx.Err() != nil:
			return err
		default:
			if err := b.reject(seg, raws[i], err); err != nil {
				return err
			}
		}
	}
	return nil
}

// reject keeps a record the database refused (or that cannot be decoded) in
// quarantine/. If even that fails, the pass stops with the segment in place:
// a record is never dropped silently.
func (b *Buffer) reject(seg spool.Segment, raw []byte, cause error) error {
	path, err := b.sp.Quarantine(fmt.Sprintf("rejected-%020d", seg.Seq), [][]byte{raw})
	if err != nil {
		return fmt.Errorf("keep a refused spooled record (%v) in quarantine: %w", cause, err)
	}
	b.rejected.Add(1)
	b.log.Error("the database refused a spooled record; kept in quarantine", "segment", seg.Path, "quarantine", path, "error", cause)
	b.noteQuarantined(path)
	return nil
}

// watchWindows keeps the queues' dedup windows fresh while PostgreSQL
// answers, and warns once when the spool's oldest record outlives one.
func (b *Buffer) watchWindows(ctx context.Context, ready func() bool) {
	if ready() && !b.down.Load() && b.windows.due() {
		if err := b.windows.refresh(ctx, b.st); err != nil {
			b.log.Debug("reading the queues' dedup windows", "error", err)
		}
	}
	stale := b.windows.exceeded(b.sp.Stats().Oldest, b.pending.queues())
	if b.windows.warnOnce(stale != "") {
		b.log.Warn(stale)
	}
}

// probeBound bounds ctx, already bounded by the database timeout (whose
// cancel is cancel), by probeTimeout too, when that is shorter; an end of
// either says PostgreSQL did not answer in time.
func probeBound(ctx context.Context, cancel context.CancelFunc) (context.Context, context.CancelFunc) {
	pctx, pcancel := context.WithTimeoutCause(ctx, probeTimeout, &store.TimeoutError{After: probeTimeout, By: "the spool's check that PostgreSQL answers"})
	return pctx, func() { pcancel(); cancel() }
}
