package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// The pgmq scenario is the curve's live queue (curve.go) run through pgmq
// instead of queenside, on the same PostgreSQL, so that the two can be read
// side by side: at each of cfg.CurveRates for cfg.CurveDuration,
// cfg.MixedProducers connections send at the offered rate, cfg.Batch
// messages a pgmq.send_batch, message k in the FIFO group
// "p"+(k mod cfg.MixedPartitions) named by its x-pgmq-group header; and
// cfg.MixedConsumers connections each read with pgmq.read_grouped_head (the
// head of up to cfg.PopBatch groups: what pgmq documents for parallel
// consumers that keep each group's order), delete what they read with
// pgmq.delete, and read again. read_grouped_head has no polling variant,
// so a consumer whose read came back empty sleeps pgmqIdle first, as a
// pgmq application polls.
//
// pgmq is not part of this repository and the bench does not download it:
// --pgmq-sql names pgmq's pgmq-extension/sql/pgmq.sql, which the scenario
// runs as a plain script (no extension to install on the server) in a
// database of its own on the bench's server, dropped at the end. Each rate
// has a queue of its own in it, with the GIN index on headers that pgmq
// recommends for FIFO queues.

// pgmqVT is the visibility timeout of a read, in seconds: pgmq's own
// example for read_grouped_head, and far longer than a delivery here takes,
// so a message is read again only when its consumer lost it.
const pgmqVT = 30

// pgmqIdle is how long a consumer whose read came back empty waits before
// reading again.
const pgmqIdle = 10 * time.Millisecond

const (
	pgmqSend   = `SELECT count(*) FROM pgmq.send_batch($1, $2::jsonb[], $3::jsonb[])`
	pgmqRead   = `SELECT msg_id, read_ct, message, headers FROM pgmq.read_grouped_head($1, $2, $3)`
	pgmqDelete = `SELECT count(*) FROM pgmq.delete($1, $2::bigint[])`
)

// scenarioPgmq runs every rate of cfg.CurveRates in turn, as the curve
// does; the points are in r.Curve, with no sidecar figures since no
// sidecar takes part.
func (b *bench) scenarioPgmq(ctx context.Context) Result {
	r := Result{Name: ScenarioPgmq}
	cc, drop, err := b.openPgmq(ctx)
	if err != nil {
		r.setupFailed(err)
		return r
	}
	defer func() {
		if err := drop(); err != nil {
			fmt.Fprintf(b.out, "  %v\n", err)
		}
	}()
	b.sweep(ctx, &r, func(ctx context.Context, rate int) (CurvePoint, *tally) { return b.pgmqPoint(ctx, cc, rate) }, pgmqLine)
	return r
}

// openPgmq makes a database for pgmq on the bench's server and loads
// pgmq's SQL into it. It returns how to connect to that database, and the
// function that drops it. A database of its own keeps pgmq's schema out of
// the bench's database and a run's queues out of the next run's.
func (b *bench) openPgmq(ctx context.Context) (*pgx.ConnConfig, func() error, error) {
	if b.cfg.PgmqSQL == "" {
		return nil, nil, errors.New("pgmq runs pgmq's own SQL, which the bench does not hold: " +
			"give --pgmq-sql with the path of pgmq's pgmq-extension/sql/pgmq.sql")
	}
	if b.dbURL == "" {
		return nil, nil, errors.New("pgmq writes to the database: give --database-url with --socket")
	}
	raw, err := os.ReadFile(b.cfg.PgmqSQL)
	if err != nil {
		return nil, nil, fmt.Errorf("--pgmq-sql: %w", err)
	}
	if !strings.Contains(string(raw), "read_grouped_head") {
		return nil, nil, fmt.Errorf("--pgmq-sql %s has no read_grouped_head: want pgmq's SQL from after its 1.11 release", b.cfg.PgmqSQL)
	}
	// The file is an extension script: CREATE EXTENSION would make the
	// schema and substitute its name, so running it as a script does both.
	script := "CREATE SCHEMA IF NOT EXISTS pgmq;\n" + strings.ReplaceAll(string(raw), "@extschema@", "pgmq")

	cc, err := pgx.ParseConfig(b.dbURL)
	if err != nil {
		return nil, nil, fmt.Errorf("database URL: %w", err)
	}
	name := "queenside_bench_pgmq_" + strings.ReplaceAll(strings.ToLower(b.runID), "-", "_")
	cc.Database = name
	ident := pgx.Identifier{name}.Sanitize()
	if err := createDatabase(ctx, b.dbURL, name); err != nil {
		return nil, nil, fmt.Errorf("pgmq loads pgmq into a database of its own: %w", err)
	}
	drop := func() error {
		// Any context: this runs on an interrupted run too.
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		admin, err := pgx.Connect(dctx, b.dbURL)
		if err != nil {
			return fmt.Errorf("drop database %s: %w", name, err)
		}
		defer admin.Close(context.Background())
		// FORCE: autovacuum may be at work in it.
		if _, err := admin.Exec(dctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
			return fmt.Errorf("drop database %s: %w", name, err)
		}
		return nil
	}
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err == nil {
		// The simple protocol, which takes many statements at once.
		_, err = conn.PgConn().Exec(ctx, script).ReadAll()
		conn.Close(context.Background())
	}
	if err != nil {
		drop() //nolint:errcheck // the load's error is the one to report
		return nil, nil, fmt.Errorf("load %s into %s: %w", b.cfg.PgmqSQL, name, err)
	}
	return cc, drop, nil
}

// pgmqPoint measures one offered rate on a pgmq queue of its own, as
// curvePoint does on queenside.
func (b *bench) pgmqPoint(ctx context.Context, cc *pgx.ConnConfig, rate int) (CurvePoint, *tally) {
	p := CurvePoint{OfferedPerSec: rate}
	queue := "curve_" + strconv.Itoa(rate)
	fail := func(err error) (CurvePoint, *tally) {
		t := newTally()
		t.failf("%s at %d msg/s: %v", ScenarioPgmq, rate, err)
		p.Errors = t.errors
		return p, t
	}
	producers, doneP, err := pgConnect(ctx, cc, b.cfg.MixedProducers)
	if err != nil {
		return fail(err)
	}
	defer doneP()
	consumers, doneC, err := pgConnect(ctx, cc, b.cfg.MixedConsumers)
	if err != nil {
		return fail(err)
	}
	defer doneC()
	if _, err := producers[0].Exec(ctx, "SELECT pgmq.create($1)", queue); err != nil {
		return fail(fmt.Errorf("create the queue: %w", err))
	}
	defer producers[0].Exec(context.Background(), "SELECT pgmq.drop_queue($1)", queue) //nolint:errcheck // the database goes at the end anyway
	if _, err := producers[0].Exec(ctx, "SELECT pgmq.create_fifo_index($1)", queue); err != nil {
		return fail(fmt.Errorf("create the FIFO index: %w", err))
	}

	msgs := newPgmqMessages(b.cfg.PayloadBytes, b.cfg.MixedPartitions)
	m := b.probe.start()
	end := time.Now().Add(b.cfg.CurveDuration)
	var inWindow, drained atomic.Int64
	pushedTotal := atomic.Int64{}
	pushedTotal.Store(-1) // unknown until the producers are done
	var pushed, consumed *tally
	var wg sync.WaitGroup
	wg.Go(func() { // the CPU of the window, and nothing after it
		time.Sleep(time.Until(end))
		var r Result
		m.stop(&r)
		p.PostgresCPUSeconds, p.benchCPUSeconds = r.PostgresCPUSeconds, r.BenchCPUSeconds
	})
	wg.Go(func() {
		pushed = b.pgmqProduce(ctx, producers, queue, msgs, rate, end)
		pushedTotal.Store(pushed.messages)
	})
	wg.Go(func() {
		drainEnd := end.Add(curveDrain)
		consumed = pgWorkers(consumers, func(_ int, c *pgx.Conn, t *tally) {
			t.partitions = map[string]struct{}{}
			var ids []int64
			for ctx.Err() == nil && time.Now().Before(drainEnd) {
				if all := pushedTotal.Load(); all >= 0 && inWindow.Load()+drained.Load() >= all {
					return
				}
				ids = b.pgmqReadDelete(ctx, c, t, queue, ids[:0])
				switch {
				case len(ids) == 0:
					t.emptyPops++
					time.Sleep(pgmqIdle)
				case time.Now().Before(end):
					inWindow.Add(int64(len(ids)))
				default:
					drained.Add(int64(len(ids)))
				}
			}
		})
	})
	wg.Wait()
	return p, p.fill(b.cfg, end, pushed, consumed, inWindow.Load(), drained.Load())
}

// pgmqMessages builds the bodies and headers of pgmq messages: a JSON
// object of about the payload size carrying the push time (UnixNano), and
// the FIFO group of message k, "p"+(k mod groups), in x-pgmq-group.
type pgmqMessages struct {
	pad     string
	headers []string // by group
}

// pgmqBodyBase is the length of a body with an empty pad and a push time of
// 19 digits, which every time from 2001 to 2286 has.
const pgmqBodyBase = len(`{"t":1234567890123456789,"pad":""}`)

func newPgmqMessages(size, groups int) pgmqMessages {
	h := make([]string, groups)
	for i := range h {
		h[i] = `{"x-pgmq-group":"p` + strconv.Itoa(i) + `"}`
	}
	return pgmqMessages{pad: strings.Repeat("x", max(size-pgmqBodyBase, 0)), headers: h}
}

// batch returns messages from..from+n-1, stamped with the time now.
func (m pgmqMessages) batch(from, n int64) (bodies, headers []string) {
	body := `{"t":` + strconv.FormatInt(time.Now().UnixNano(), 10) + `,"pad":"` + m.pad + `"}`
	bodies, headers = make([]string, n), make([]string, n)
	for i := range n {
		bodies[i] = body
		headers[i] = m.headers[(from+i)%int64(len(m.headers))]
	}
	return bodies, headers
}

// pgmqProduce sends batches from every producer connection until end, each
// at its share of rate messages/s, paced as produce paces the curve's
// pushes. A PostgreSQL connection runs one statement at a time, so each
// has one worker whatever cfg.Inflight says.
func (b *bench) pgmqProduce(ctx context.Context, conns []*pgx.Conn, queue string, msgs pgmqMessages, rate int, end time.Time) *tally {
	var next atomic.Int64
	batch := int64(b.cfg.Batch)
	interval := time.Duration(float64(batch) / (float64(rate) / float64(len(conns))) * float64(time.Second))
	begin := time.Now()
	return pgWorkers(conns, func(w int, c *pgx.Conn, t *tally) {
		start := begin.Add(interval * time.Duration(w) / time.Duration(len(conns)))
		for i := 0; ctx.Err() == nil; i++ {
			if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
				time.Sleep(min(wait, time.Until(end)))
			}
			if !time.Now().Before(end) {
				return
			}
			from := next.Add(batch) - batch
			bodies, headers := msgs.batch(from, batch)
			began := time.Now()
			var sent int64
			if err := c.QueryRow(ctx, pgmqSend, queue, bodies, headers).Scan(&sent); err != nil {
				if ctx.Err() == nil {
					t.took("push", began)
					t.failf("send_batch: %v", err)
				}
				continue
			}
			t.took("push", began)
			if sent != batch {
				t.failf("send_batch: %d messages sent of %d", sent, batch)
			}
			t.messages += sent
		}
	})
}

// pgmqReadDelete reads the heads of up to cfg.PopBatch groups, records
// their delivery, deletes them, and returns their ids appended to ids.
func (b *bench) pgmqReadDelete(ctx context.Context, c *pgx.Conn, t *tally, queue string, ids []int64) []int64 {
	type read struct {
		body, headers []byte
		readCt        int32
	}
	var got []read
	began := time.Now()
	rows, err := c.Query(ctx, pgmqRead, queue, pgmqVT, b.cfg.PopBatch)
	if err == nil {
		for rows.Next() {
			var id int64
			var r read
			if err = rows.Scan(&id, &r.readCt, &r.body, &r.headers); err != nil {
				break
			}
			ids = append(ids, id)
			got = append(got, r)
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	at := time.Now()
	if err != nil {
		if ctx.Err() == nil {
			t.took("pop", began)
			t.failf("read_grouped_head: %v", err)
		}
		return ids[:0] // unread: their visibility timeout gives them back
	}
	t.took("pop", began)
	if len(got) == 0 {
		return ids
	}
	t.messages += int64(len(got))
	t.lastDelivery = at
	for _, r := range got {
		var body struct {
			T int64 `json:"t"`
		}
		var h struct {
			Group string `json:"x-pgmq-group"`
		}
		if json.Unmarshal(r.body, &body) == nil && body.T > 0 {
			t.delivery = append(t.delivery, at.Sub(time.Unix(0, body.T)))
		}
		if json.Unmarshal(r.headers, &h) == nil {
			t.partitions[h.Group] = struct{}{}
		}
		if r.readCt > 1 {
			t.redelivered++
		}
	}
	began = time.Now()
	var deleted int64
	if err := c.QueryRow(ctx, pgmqDelete, queue, ids).Scan(&deleted); err != nil {
		if ctx.Err() == nil {
			t.took("ack", began)
			t.failf("delete: %v", err)
		}
		return ids
	}
	t.took("ack", began)
	if deleted != int64(len(ids)) {
		t.failf("delete: %d of %d messages deleted", deleted, len(ids))
	}
	return ids
}

// pgConnect opens n connections to PostgreSQL with cc, before any meter
// starts.
func pgConnect(ctx context.Context, cc *pgx.ConnConfig, n int) ([]*pgx.Conn, func(), error) {
	conns := make([]*pgx.Conn, 0, n)
	closeAll := func() {
		for _, c := range conns {
			c.Close(context.Background())
		}
	}
	for range n {
		c, err := pgx.ConnectConfig(ctx, cc)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("connect to PostgreSQL: %w", err)
		}
		conns = append(conns, c)
	}
	return conns, closeAll, nil
}

// pgWorkers runs one worker on each connection, as workers does on the
// sidecar's, and merges their tallies.
func pgWorkers(conns []*pgx.Conn, fn func(w int, c *pgx.Conn, t *tally)) *tally {
	ts := tallies(len(conns))
	var wg sync.WaitGroup
	for w := range ts {
		wg.Go(func() { fn(w, conns[w], ts[w]) })
	}
	wg.Wait()
	return newTally().merge(ts...)
}

// pgmqLine reports one rate as soon as it is measured, with the figures of
// the curve's line that apply when no sidecar takes part.
func pgmqLine(p CurvePoint) string {
	d50, d99, dmax := latencyCols(p.Delivery)
	share := "-"
	if p.Pushed > 0 {
		share = fmt.Sprintf("%.1f%%", float64(p.Delivered)/float64(p.Pushed)*100)
	}
	drain := fmt.Sprintf("drained in %.2f s", p.DrainSeconds)
	if !p.Drained {
		drain = fmt.Sprintf("not drained in %.0f s", p.DrainSeconds)
	}
	line := fmt.Sprintf("%s msg/s offered: %s delivered in the window (%s, %s/s), %s left, %s, delivery p50 %s ms p99 %s ms max %s ms, PostgreSQL %s µs a message, %d of %d groups served",
		thousands(float64(p.OfferedPerSec)), thousands(float64(p.Delivered)), share, thousands(p.DeliveredPerSec),
		thousands(float64(p.Left)), drain, d50, d99, dmax, opt(p.PostgresMicrosPer, "%.1f"), p.PartitionsServed, p.PartitionsPushed)
	if p.Redelivered > 0 {
		line += fmt.Sprintf(", %s redelivered", thousands(float64(p.Redelivered)))
	}
	return line
}
