package buffer

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/google/uuid"
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
	}
	if n := b.replayed.Load() - before; n > 0 {
		b.log.Info("replayed the spool", "records", n, "took", time.Since(start).Round(time.Millisecond))
	}
	if b.sp.Stats().Records == 0 {
		// Nothing waits on the disk now; a push it refuses says so again.
		b.diskAccepted()
	}
	return nil
}

// replaySegment pushes a segment's records in batches, each recording in
// its transaction how far the segment is stored (store.ReplayMark), and
// retires the segment once all of it is. It first reads that record and
// skips what it covers: the batches a crash or a full disk kept the spool
// from noting as replayed.
func (b *Buffer) replaySegment(ctx context.Context, seg spool.Segment) error {
	id, err := b.sp.Identity(seg)
	if err != nil {
		return err
	}
	segment := uuid.UUID(id)
	pctx, cancel := b.st.Bound(ctx)
	stored, err := b.st.ReplayedTo(pctx, segment)
	cancel()
	if err != nil {
		return err
	}
	var (
		batch   []store.Message
		raws    [][]byte
		ends    []int64
		skipped []partitionKey
		end     int64
	)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := b.store(ctx, seg, segment, batch, raws, ends); err != nil {
			return err
		}
		keys := make([]partitionKey, len(batch))
		for i, m := range batch {
			keys[i] = partitionKey{m.Queue, m.Partition}
		}
		b.settle(seg, keys, end)
		batch, raws, ends = batch[:0], raws[:0], ends[:0]
		return nil
	}
	err = b.sp.Read(seg, func(r spool.Record) error {
		m, err := decodeRecord(r.Data)
		if r.End <= stored {
			// In the database already. A record that does not decode
			// was kept in quarantine/ then, and never counted.
			if err == nil {
				skipped = append(skipped, partitionKey{m.Queue, m.Partition})
			}
			end = r.End
			return nil
		}
		if len(skipped) > 0 {
			b.skip(seg, skipped, end)
			skipped = nil
		}
		end = r.End
		if err != nil {
			return b.reject(seg, r.Data, err)
		}
		batch, raws, ends = append(batch, m), append(raws, r.Data), append(ends, r.End)
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
	if len(skipped) > 0 {
		b.skip(seg, skipped, end)
	}
	if err := b.sp.Retire(seg, end); err != nil {
		return fmt.Errorf("retire replayed spool segment: %w", err)
	}
	pctx, cancel = b.st.Bound(ctx)
	defer cancel()
	if err := b.st.ForgetReplayed(pctx, segment); err != nil {
		// A mark left behind names a segment that is gone; a later
		// retirement removes it once it is stale.
		b.log.Debug("forgetting a retired segment's replay progress", "error", err)
	}
	return nil
}

// skip settles records an earlier replay stored, which the spool did not
// note (a crash, or its disk full, between the commit and the note).
func (b *Buffer) skip(seg spool.Segment, keys []partitionKey, end int64) {
	b.log.Info("skipping spooled records the database holds from an earlier replay",
		"segment", filepath.Base(seg.Path), "records", len(keys))
	b.skipped.Add(int64(len(keys)))
	b.settle(seg, keys, end)
}

// settle counts keys, the partitions of records now in the database, as no
// longer waiting, and notes on the spool's disk that seg is replayed up to
// end. If the disk refuses (it is full), the database's own record of the
// progress stands in for the note: the replay goes on, said in a warning.
func (b *Buffer) settle(seg spool.Segment, keys []partitionKey, end int64) {
	b.pending.add(keys, -1)
	if err := b.sp.MarkReplayed(seg, end); err != nil {
		b.diskRefused(err)
		return
	}
	b.diskAccepted()
}

// store pushes one batch, ends being the End of each of its records. A
// record already stored (its first attempt committed before an outage)
// comes back a duplicate in a queue that deduplicates, which counts as
// done. If the database refuses the batch for what is in it, the records
// are tried one by one, and the ones it refuses are kept in quarantine/
// rather than replayed forever.
func (b *Buffer) store(ctx context.Context, seg spool.Segment, segment uuid.UUID, batch []store.Message, raws [][]byte, ends []int64) (err error) {
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
	_, err = b.st.PushReplay(pctx, batch, store.ReplayMark{Segment: segment, End: ends[len(ends)-1]})
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
		_, err := b.st.PushReplay(pctx, batch[i:i+1], store.ReplayMark{Segment: segment, End: ends[i]})
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
