package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	queenside "github.com/queenside/queenside/clients/go"
)

// The soak queue keeps consumed messages for cfg.SoakCompletedRetention
// seconds and deduplicates over a minute; its hashes are kept 900 s, the
// floor, whatever the window.
const soakDedupWindow = 60

// scenarioSoak pushes at cfg.SoakRate for cfg.SoakDuration while a group
// consumes and acks everything, with retention on, and every
// cfg.SoakSample prints the tables' sizes and tuples. It fails when a table
// did not stay flat after the warm-up (see checkSoak). Its rate is what
// the consumers received, as in mixed.
func (b *bench) scenarioSoak(ctx context.Context) Result {
	r := Result{Name: ScenarioSoak}
	if b.dbURL == "" {
		r.setupFailed(errors.New("soak reads the tables' sizes: it needs --database-url, or the PostgreSQL the bench starts"))
		return r
	}
	queue := b.queue(ScenarioSoak)
	producers, doneP, err := dial(ctx, b.socket, b.cfg.Connections)
	if err != nil {
		r.setupFailed(err)
		return r
	}
	defer doneP()
	opts := queenside.DefaultQueueOptions()
	opts.CompletedRetentionSeconds = b.cfg.SoakCompletedRetention
	opts.DedupWindowSeconds = soakDedupWindow
	if _, err := producers[0].Configure(ctx, queue, opts); err != nil {
		r.setupFailed(fmt.Errorf("configure %s: %w", queue, err))
		return r
	}
	consumers, doneC, err := dial(ctx, b.socket, b.cfg.Connections+1) // and one to read stats on
	if err != nil {
		r.setupFailed(err)
		return r
	}
	defer doneC()
	db, err := pgx.Connect(ctx, b.dbURL)
	if err != nil {
		r.setupFailed(fmt.Errorf("connect to the database: %w", err))
		return r
	}
	defer db.Close(context.Background())

	b.printSoakHeader(opts)
	w := soakWatch{b: b, db: db, client: consumers[len(consumers)-1], queue: queue, group: ScenarioSoak, t: newTally(),
		deliveries: &deliveryLog{}}
	consumers = consumers[:len(consumers)-1]
	bt := b.newBatcher(queue, ScenarioSoak, b.cfg.SoakPartitions)
	m := b.probe.start()
	w.start = time.Now()
	end := w.start.Add(b.cfg.SoakDuration)
	var pushed, consumed *tally
	var wg sync.WaitGroup
	wg.Go(func() { pushed = b.produce(ctx, producers, bt, b.cfg.SoakRate, end) })
	wg.Go(func() {
		args := queenside.PopArgs{Queue: queue, Group: ScenarioSoak, Batch: b.cfg.PopBatch,
			Partitions: min(b.cfg.SoakPartitions, b.cfg.MixedPopPartitions)}
		consumed = workers(consumers, b.cfg.Inflight, func(_ int, c *queenside.Client, t *tally) {
			t.shared = w.deliveries
			consumeUntil(ctx, c, t, args, b.cfg.MixedWaitMs, end)
		})
	})
	w.sampleUntil(ctx, end)
	wg.Wait()
	m.stop(&r)
	w.sample(ctx) // the state the run ended in
	pushed.pushed, pushed.messages = pushed.messages, 0
	r.absorb(pushed.merge(consumed, w.t), "push")

	rep := checkSoak(w.samples, b.cfg.SoakWarmup)
	rep.FirstMinute, rep.LastMinute = w.minute(0, time.Minute), w.minute(b.cfg.SoakDuration-time.Minute, b.cfg.SoakDuration)
	r.Soak = &rep
	for _, v := range rep.Violations { // a table that grew fails the run
		r.Errors++
		if len(r.ErrorSamples) < maxSamples {
			r.ErrorSamples = append(r.ErrorSamples, v)
		}
	}
	b.printSoakSummary(rep)
	return r
}

// soakWatch takes the soak's samples.
type soakWatch struct {
	b       *bench
	db      *pgx.Conn
	client  *queenside.Client
	queue   string
	group   string
	start   time.Time
	samples []SoakSample
	t       *tally // errors of sampling
	// deliveries receives the consumers' delivery times; each sample takes
	// those of its window into windows (windows[i] ends at samples[i]).
	deliveries *deliveryLog
	windows    [][]time.Duration
}

// minute is what the samples from..to after the start saw: PostgreSQL's
// CPU a message consumed, and the delivery p99 of the windows ending in it.
// A sample is taken a little after its time: half a period of slack at
// either end keeps it in.
func (w *soakWatch) minute(from, to time.Duration) *SoakWindow {
	var first, last *SoakSample
	var d []time.Duration
	slack := w.b.cfg.SoakSample / 2
	for i := range w.samples {
		s := &w.samples[i]
		at := time.Duration(s.Seconds * float64(time.Second))
		if at < from-slack || at > to+slack {
			continue
		}
		if first == nil {
			first = s
			continue // its window ended before from
		}
		last = s
		d = append(d, w.windows[i]...)
	}
	if first == nil || last == nil || last.Consumed <= first.Consumed || len(d) == 0 {
		return nil
	}
	win := &SoakWindow{From: first.Seconds, To: last.Seconds, Consumed: last.Consumed - first.Consumed,
		DeliveryP99Ms: ms(percentile(slices.Sorted(slices.Values(d)), 0.99))}
	if first.PostgresCPUSeconds != nil && last.PostgresCPUSeconds != nil {
		win.PostgresMicros = (*last.PostgresCPUSeconds - *first.PostgresCPUSeconds) * 1e6 / float64(win.Consumed)
	}
	return win
}

// sampleUntil samples at the start and every cfg.SoakSample until end.
func (w *soakWatch) sampleUntil(ctx context.Context, end time.Time) {
	for i := 0; ctx.Err() == nil; i++ {
		next := w.start.Add(time.Duration(i) * w.b.cfg.SoakSample)
		if !next.Before(end) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(next)):
		}
		w.sample(ctx)
	}
}

// sample records and prints one sample; a failure is the soak's error.
func (w *soakWatch) sample(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s := SoakSample{Seconds: time.Since(w.start).Seconds()}
	if pg := w.b.probe.sample().postgres; pg != nil {
		s.PostgresCPUSeconds = ptr(float64(*pg) / w.b.probe.hz)
	}
	window := w.deliveries.take()
	var err error
	if s.Tables, err = readTables(ctx, w.db); err != nil {
		w.t.failf("sample: %v", err)
		return
	}
	st, err := w.client.Stats(ctx, w.queue)
	if err != nil {
		w.t.failf("sample: stats: %v", err)
		return
	}
	for _, p := range st.Partitions {
		s.Pushed += p.HeadOffset
		s.Retained += p.Messages
		for _, g := range p.Groups {
			if g.Group == w.group {
				s.Consumed += g.Cursor
			}
		}
	}
	if len(window) > 0 {
		s.DeliveryP99Ms = ms(percentile(slices.Sorted(slices.Values(window)), 0.99))
	}
	if n := len(w.samples); n > 0 {
		prev := w.samples[n-1]
		if prev.PostgresCPUSeconds != nil && s.PostgresCPUSeconds != nil && s.Consumed > prev.Consumed {
			s.PostgresMicros = (*s.PostgresCPUSeconds - *prev.PostgresCPUSeconds) * 1e6 / float64(s.Consumed-prev.Consumed)
		}
	}
	w.samples = append(w.samples, s)
	w.windows = append(w.windows, window)
	w.b.printSoakSample(s)
}
