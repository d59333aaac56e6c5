package bench

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// What PostgreSQL writes for the messages a scenario moves: the row
// versions of each queenside table (inserted, updated in place or not,
// deleted), the WAL, and the commits, read from PostgreSQL's own counters
// before and after. A row updated in place (HOT) writes no index entry; one
// that is not writes a new entry in every index of its table.

// TableWrites counts the row versions a table was given.
type TableWrites struct {
	Inserted   int64 `json:"inserted"`
	Updated    int64 `json:"updated"`
	HotUpdated int64 `json:"hotUpdated"` // of Updated
	Deleted    int64 `json:"deleted"`
}

// Tuples is every row version written: inserted, updated or deleted.
func (t TableWrites) Tuples() int64 { return t.Inserted + t.Updated + t.Deleted }

func (t TableWrites) minus(o TableWrites) TableWrites {
	return TableWrites{Inserted: t.Inserted - o.Inserted, Updated: t.Updated - o.Updated,
		HotUpdated: t.HotUpdated - o.HotUpdated, Deleted: t.Deleted - o.Deleted}
}

// Writes is what PostgreSQL wrote while a scenario moved Messages
// messages (delivered, or pushed where nothing is delivered), and the
// same per message.
type Writes struct {
	Messages int64                  `json:"messages"`
	Tables   map[string]TableWrites `json:"tables"` // tables written to, counts over the run
	WALBytes int64                  `json:"walBytes"`
	Commits  int64                  `json:"commits"`

	PerMessage WritesPerMessage `json:"perMessage"`
}

// WritesPerMessage divides Writes by its messages.
type WritesPerMessage struct {
	Inserted     float64 `json:"inserted"`
	Updated      float64 `json:"updated"`
	NonHot       float64 `json:"nonHotUpdated"`
	Deleted      float64 `json:"deleted"`
	Tuples       float64 `json:"tuples"` // inserted + updated + deleted
	WALBytes     float64 `json:"walBytes"`
	Commits      float64 `json:"commits"`
	NonHotTables string  `json:"nonHotTables,omitempty"` // the tables of NonHot, per message each
}

// writeSample is PostgreSQL's counters at one moment.
type writeSample struct {
	tables  map[string]TableWrites
	wal     string // pg_current_wal_lsn()
	commits int64
}

// PostgreSQL's counters lag what was written: a backend publishes its
// counts when idle, about a second after its last publication, and one
// that finds the shared counters busy tries again 10 s later. So a sample
// waits until the table counters have held still for the probe's quiet
// (Config.WritesQuiet; reads and their commits go on: the sidecar looks at
// its control state), and gives up after four times that.
const statsPoll = 500 * time.Millisecond

const writeCountersSQL = `
SELECT coalesce(jsonb_object_agg(s.relname, jsonb_build_object(
           'inserted', s.n_tup_ins, 'updated', s.n_tup_upd, 'hotUpdated', s.n_tup_hot_upd, 'deleted', s.n_tup_del))
         FILTER (WHERE s.relname IS NOT NULL), '{}'),
       pg_current_wal_lsn()::text,
       (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database())
  FROM pg_stat_all_tables s
 WHERE s.schemaname = 'queenside'`

// writeProbe reads the counters on a connection of its own; nil when the
// bench does not know the database (a sidecar given by --socket alone) or
// was asked for no write counts.
type writeProbe struct {
	conn  *pgx.Conn
	quiet time.Duration
}

func openWriteProbe(ctx context.Context, dbURL string, quiet time.Duration) (*writeProbe, error) {
	if dbURL == "" || quiet <= 0 {
		return nil, nil
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, fmt.Errorf("write counters: %w", err)
	}
	return &writeProbe{conn: conn, quiet: quiet}, nil
}

func (w *writeProbe) close() {
	if w != nil {
		w.conn.Close(context.Background())
	}
}

// sample waits for what was written to be published, then reads it.
func (w *writeProbe) sample(ctx context.Context) (*writeSample, error) {
	if w == nil {
		return nil, nil
	}
	last, err := w.read(ctx)
	if err != nil {
		return nil, err
	}
	for quiet, waited := time.Duration(0), time.Duration(0); quiet < w.quiet; waited += statsPoll {
		if waited >= 4*w.quiet {
			return nil, fmt.Errorf("write counters: still moving after %v", 4*w.quiet)
		}
		select {
		case <-time.After(statsPoll):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		s, err := w.read(ctx)
		if err != nil {
			return nil, err
		}
		if maps.Equal(s.tables, last.tables) {
			quiet += statsPoll
		} else {
			quiet = 0
		}
		last = s
	}
	return last, nil
}

func (w *writeProbe) read(ctx context.Context) (*writeSample, error) {
	// Statistics are cached for the transaction once read: each sample
	// wants them afresh.
	if _, err := w.conn.Exec(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
		return nil, fmt.Errorf("write counters: %w", err)
	}
	s := &writeSample{}
	if err := w.conn.QueryRow(ctx, writeCountersSQL).Scan(&s.tables, &s.wal, &s.commits); err != nil {
		return nil, fmt.Errorf("write counters: %w", err)
	}
	return s, nil
}

// since is what was written from before to after, for messages messages;
// nil when either sample is missing.
func since(before, after *writeSample, messages int64) (*Writes, error) {
	if before == nil || after == nil {
		return nil, nil
	}
	from, err := parseLSN(before.wal)
	if err != nil {
		return nil, err
	}
	to, err := parseLSN(after.wal)
	if err != nil {
		return nil, err
	}
	out := &Writes{Messages: messages, Tables: map[string]TableWrites{}, Commits: after.commits - before.commits,
		WALBytes: int64(to - from)}
	for name, a := range after.tables {
		if d := a.minus(before.tables[name]); d.Tuples() > 0 {
			out.Tables[name] = d
		}
	}
	if messages <= 0 {
		return out, nil
	}
	per := func(n int64) float64 { return float64(n) / float64(messages) }
	p := &out.PerMessage
	var nonHot []string
	for _, name := range slices.Sorted(maps.Keys(out.Tables)) {
		t := out.Tables[name]
		p.Inserted += per(t.Inserted)
		p.Updated += per(t.Updated)
		p.Deleted += per(t.Deleted)
		if n := t.Updated - t.HotUpdated; n > 0 {
			p.NonHot += per(n)
			nonHot = append(nonHot, fmt.Sprintf("%s %.2f", name, per(n)))
		}
	}
	p.Tuples = p.Inserted + p.Updated + p.Deleted
	p.WALBytes, p.Commits = per(out.WALBytes), per(out.Commits)
	p.NonHotTables = strings.Join(nonHot, ", ")
	return out, nil
}

// countWrites starts counting what PostgreSQL writes; the function it
// returns ends the count and divides it by the messages the scenario
// moved. A count that cannot be read is reported and left out (nil).
func (b *bench) countWrites(ctx context.Context) func(messages int64) *Writes {
	before, err := b.writes.sample(ctx)
	if err != nil {
		fmt.Fprintf(b.out, "  %v\n", err)
		return func(int64) *Writes { return nil }
	}
	return func(messages int64) *Writes {
		after, err := b.writes.sample(ctx)
		var w *Writes
		if err == nil {
			w, err = since(before, after, messages)
		}
		if err != nil {
			fmt.Fprintf(b.out, "  %v\n", err)
		}
		return w
	}
}

// parseLSN reads a WAL position as PostgreSQL writes it: two hexadecimal
// halves of a 64-bit byte position, "16/B374D848".
func parseLSN(lsn string) (uint64, error) {
	hi, lo, ok := strings.Cut(lsn, "/")
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if !ok || err1 != nil || err2 != nil {
		return 0, fmt.Errorf("write counters: WAL position %q", lsn)
	}
	return h<<32 | l, nil
}

// writesLine is one line for people: what a message cost PostgreSQL in
// writes, and where the updates that were not in place went.
func writesLine(w *Writes) string {
	if w == nil || w.Messages == 0 {
		return "writes: not measured"
	}
	p := w.PerMessage
	line := fmt.Sprintf("writes a message: %.2f tuples (%.2f inserted, %.2f updated, %.2f not in place, %.2f deleted), %.0f WAL bytes, %.3f commits",
		p.Tuples, p.Inserted, p.Updated, p.NonHot, p.Deleted, p.WALBytes, p.Commits)
	if p.NonHotTables != "" {
		line += "; not in place: " + p.NonHotTables
	}
	return line
}
