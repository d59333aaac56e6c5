package bench

import (
	"context"
	"errors"
	"fmt"
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
	w := soakWatch{b: b, db: db, client: consumers[len(consumers)-1], queue: queue, group: ScenarioSoak, t: newTally()}
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
	w.samples = append(w.samples, s)
	w.b.printSoakSample(s)
}
