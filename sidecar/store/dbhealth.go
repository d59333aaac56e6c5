package store

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The database's health from the queues' point of view: what PostgreSQL's
// statistics views and catalogs say of queenside's tables, of what holds
// back vacuum, of connections and of replication. Every query reads a
// pg_stat_* view or a catalog size, never a row of a queue table, and each
// is bounded by the schema's tables, the server's connections or its
// replication slots, however many messages there are.

// DatabaseHealth is one reading, with the problems it shows in words.
type DatabaseHealth struct {
	At                   time.Time             `json:"at"` // the database's clock
	ServerVersion        string                `json:"serverVersion"`
	InRecovery           bool                  `json:"inRecovery"` // this server is a standby
	Tables               []TableHealth         `json:"tables"`
	OldestTransaction    *OpenTransaction      `json:"oldestTransaction,omitempty"`
	PreparedTransactions []PreparedTransaction `json:"preparedTransactions"`
	ReplicationSlots     []ReplicationSlot     `json:"replicationSlots"`
	Connections          Connections           `json:"connections"`
	Standbys             []Standby             `json:"standbys"`         // pg_stat_replication
	Replay               *Replay               `json:"replay,omitempty"` // on a standby
	Notes                []string              `json:"notes"`            // what this reading cannot see
	Problems             []Problem             `json:"problems"`
}

// TableHealth is one table of the queenside schema: its sizes (heap, TOAST
// and indexes apart) and what vacuum has left of it.
type TableHealth struct {
	Table            string      `json:"table"`
	TotalBytes       int64       `json:"totalBytes"`
	HeapBytes        int64       `json:"heapBytes"`
	ToastBytes       int64       `json:"toastBytes"`
	IndexBytes       int64       `json:"indexBytes"`
	Indexes          []IndexSize `json:"indexes"`
	LiveTuples       int64       `json:"liveTuples"`
	DeadTuples       int64       `json:"deadTuples"`
	DeadPercent      float64     `json:"deadPercent"` // of live and dead
	ModsSinceAnalyze int64       `json:"modsSinceAnalyze"`
	LastVacuum       *time.Time  `json:"lastVacuum,omitempty"`
	LastAutovacuum   *time.Time  `json:"lastAutovacuum,omitempty"`
	LastAnalyze      *time.Time  `json:"lastAnalyze,omitempty"`
	LastAutoanalyze  *time.Time  `json:"lastAutoanalyze,omitempty"`
}

// IndexSize is one index of a table.
type IndexSize struct {
	Index string `json:"index"`
	Bytes int64  `json:"bytes"`
	Scans int64  `json:"scans"`
}

// OpenTransaction is the oldest transaction open in this database that
// holds back the horizon, or else the oldest open.
type OpenTransaction struct {
	PID          int32      `json:"pid"`
	Application  string     `json:"application"`
	User         string     `json:"user"`
	State        string     `json:"state"`
	XactStart    time.Time  `json:"xactStart"`
	QueryStart   *time.Time `json:"queryStart,omitempty"`
	AgeSeconds   float64    `json:"ageSeconds"`
	HoldsHorizon bool       `json:"holdsHorizon"`     // it has an xid or a snapshot
	XidAge       *int64     `json:"xidAge,omitempty"` // transactions since its xid or snapshot's xmin
	WaitEvent    string     `json:"waitEvent,omitempty"`
	Query        string     `json:"query"` // its current or last statement, cut at queryTextMax
	// QueryHidden says that Query was left out: the reader may not see it.
	QueryHidden bool `json:"queryHidden,omitempty"`
}

// PreparedTransaction is a two-phase transaction prepared in this database
// and not yet committed or rolled back.
type PreparedTransaction struct {
	GID        string    `json:"gid"`
	Owner      string    `json:"owner"`
	Prepared   time.Time `json:"prepared"`
	AgeSeconds float64   `json:"ageSeconds"`
	XidAge     int64     `json:"xidAge"`
}

// ReplicationSlot is one slot of the server. XidAge is set when the slot
// holds back the horizon of every table (a physical slot fed back by its
// standby); CatalogXidAge when it holds back that of the system catalogs
// (a logical slot).
type ReplicationSlot struct {
	Slot             string `json:"slot"`
	Type             string `json:"type"`
	Database         string `json:"database,omitempty"`
	Active           bool   `json:"active"`
	XidAge           *int64 `json:"xidAge,omitempty"`
	CatalogXidAge    *int64 `json:"catalogXidAge,omitempty"`
	RetainedWALBytes *int64 `json:"retainedWalBytes,omitempty"`
	WALStatus        string `json:"walStatus,omitempty"`
}

// Connections counts the server's client sessions: by state over the
// whole server (max_connections is the server's), by application in this
// database.
type Connections struct {
	Max           int64            `json:"max"`           // max_connections
	Reserved      int64            `json:"reserved"`      // superuser_reserved_connections
	Total         int64            `json:"total"`         // client sessions of the server
	Hidden        int64            `json:"hidden"`        // whose state this role may not see
	ByState       []StateCount     `json:"byState"`       // of the server
	ByApplication []AppConnections `json:"byApplication"` // of this database
}

// StateCount is how many sessions are in one state ("hidden" for those this
// role may not see).
type StateCount struct {
	State string `json:"state"`
	Count int64  `json:"count"`
}

// AppConnections is one application_name's sessions in this database.
// Queenside marks the sessions of sidecars ("queenside/<sidecarId>").
type AppConnections struct {
	Application       string `json:"application"`
	Queenside         bool   `json:"queenside"`
	Total             int64  `json:"total"`
	Active            int64  `json:"active"`
	Idle              int64  `json:"idle"`
	IdleInTransaction int64  `json:"idleInTransaction"`
	Other             int64  `json:"other"` // any other state, or hidden
}

// Standby is one standby streaming from this server (pg_stat_replication).
// The lags are what the standby last reported; PostgreSQL clears them
// when it is caught up and the primary writes nothing.
type Standby struct {
	Application      string   `json:"application"`
	ClientAddr       string   `json:"clientAddr"`
	State            string   `json:"state"`
	SyncState        string   `json:"syncState"`
	WriteLagSeconds  *float64 `json:"writeLagSeconds,omitempty"`
	FlushLagSeconds  *float64 `json:"flushLagSeconds,omitempty"`
	ReplayLagSeconds *float64 `json:"replayLagSeconds,omitempty"`
	ReplayLagBytes   *int64   `json:"replayLagBytes,omitempty"`
}

// Replay is this server's own replay when it is a standby.
type Replay struct {
	LastReplayAt *time.Time `json:"lastReplayAt,omitempty"` // commit time of the last replayed transaction
	SecondsSince *float64   `json:"secondsSince,omitempty"`
	BytesBehind  *int64     `json:"bytesBehind,omitempty"` // received but not replayed
	CaughtUp     bool       `json:"caughtUp"`
}

const (
	// queryTextMax bounds the statement text shown of a transaction.
	queryTextMax = 500
	// Bounds of the lists, far above what a server has.
	maxTablesListed, maxIndexesListed, maxSlotsListed = 200, 1000, 100
	// healthLockTimeout bounds the wait for a table's lock, which the size
	// functions take (ACCESS SHARE): a migration holding one must not hold
	// the page.
	healthLockTimeout = "2s"
)

// DatabaseHealth reads the database's health in one read-only transaction.
// On Citus it describes the coordinator only, and says so in Notes.
func (s *Store) DatabaseHealth(ctx context.Context) (DatabaseHealth, error) {
	var h DatabaseHealth
	err := s.inTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '"+healthLockTimeout+"'"); err != nil {
			return err
		}
		steps := []struct {
			what string
			read func(context.Context, pgx.Tx, *DatabaseHealth) error
		}{
			{"server", readServer}, {"tables", readTables}, {"indexes", readIndexes},
			{"transactions", readOldestTransaction}, {"prepared transactions", readPrepared},
			{"replication slots", readSlots}, {"connections", readConnections}, {"replication", readReplication},
		}
		for _, step := range steps {
			if err := step.read(ctx, tx, &h); err != nil {
				return fmt.Errorf("%s: %w", step.what, err)
			}
		}
		return nil
	})
	if err != nil {
		return DatabaseHealth{}, fmt.Errorf("database health: %w", err)
	}
	h.Problems = healthProblems(h)
	return h, nil
}

// currentLSN is where the server's WAL is now: its own on a primary, what
// it has replayed on a standby (where pg_current_wal_lsn fails).
func currentLSN(h *DatabaseHealth) string {
	if h.InRecovery {
		return "pg_last_wal_replay_lsn()"
	}
	return "pg_current_wal_lsn()"
}

func readServer(ctx context.Context, tx pgx.Tx, h *DatabaseHealth) error {
	var citus bool
	err := tx.QueryRow(ctx, `
		SELECT now(), current_setting('server_version'), pg_is_in_recovery(),
		       current_setting('max_connections')::bigint, current_setting('superuser_reserved_connections')::bigint,
		       EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')`).
		Scan(&h.At, &h.ServerVersion, &h.InRecovery, &h.Connections.Max, &h.Connections.Reserved, &citus)
	h.Notes = []string{}
	if citus {
		h.Notes = append(h.Notes, "This is a Citus coordinator: these figures are the coordinator's own; "+
			"the tables' rows, their sizes and dead tuples live on the workers, which each have their own.")
	}
	return err
}

func readTables(ctx context.Context, tx pgx.Tx, h *DatabaseHealth) error {
	rows, err := tx.Query(ctx, `
		SELECT c.relname, pg_total_relation_size(c.oid), pg_table_size(c.oid), pg_indexes_size(c.oid),
		       coalesce(pg_total_relation_size(nullif(c.reltoastrelid, 0)), 0),
		       coalesce(s.n_live_tup, 0), coalesce(s.n_dead_tup, 0), coalesce(s.n_mod_since_analyze, 0),
		       s.last_vacuum, s.last_autovacuum, s.last_analyze, s.last_autoanalyze
		  FROM pg_class c
		  JOIN pg_namespace n ON n.oid = c.relnamespace
		  LEFT JOIN pg_stat_all_tables s ON s.relid = c.oid
		 WHERE n.nspname = 'queenside' AND c.relkind IN ('r', 'p')
		 ORDER BY 2 DESC, 1 LIMIT $1`, maxTablesListed)
	if err != nil {
		return err
	}
	h.Tables = []TableHealth{}
	for rows.Next() {
		t := TableHealth{Indexes: []IndexSize{}}
		var tableBytes int64
		if err := rows.Scan(&t.Table, &t.TotalBytes, &tableBytes, &t.IndexBytes, &t.ToastBytes,
			&t.LiveTuples, &t.DeadTuples, &t.ModsSinceAnalyze,
			&t.LastVacuum, &t.LastAutovacuum, &t.LastAnalyze, &t.LastAutoanalyze); err != nil {
			rows.Close()
			return err
		}
		// pg_table_size counts the TOAST table (and its index) in.
		t.HeapBytes = tableBytes - t.ToastBytes
		if all := t.LiveTuples + t.DeadTuples; all > 0 {
			t.DeadPercent = 100 * float64(t.DeadTuples) / float64(all)
		}
		h.Tables = append(h.Tables, t)
	}
	rows.Close()
	return rows.Err()
}

func readIndexes(ctx context.Context, tx pgx.Tx, h *DatabaseHealth) error {
	rows, err := tx.Query(ctx, `
		SELECT t.relname, i.relname, pg_relation_size(i.oid), coalesce(s.idx_scan, 0)
		  FROM pg_index x
		  JOIN pg_class i ON i.oid = x.indexrelid
		  JOIN pg_class t ON t.oid = x.indrelid
		  JOIN pg_namespace n ON n.oid = t.relnamespace
		  LEFT JOIN pg_stat_all_indexes s ON s.indexrelid = i.oid
		 WHERE n.nspname = 'queenside'
		 ORDER BY 3 DESC, 2 LIMIT $1`, maxIndexesListed)
	if err != nil {
		return err
	}
	defer rows.Close()
	byTable := map[string]*TableHealth{}
	for i := range h.Tables {
		byTable[h.Tables[i].Table] = &h.Tables[i]
	}
	for rows.Next() {
		var table string
		var ix IndexSize
		if err := rows.Scan(&table, &ix.Index, &ix.Bytes, &ix.Scans); err != nil {
			return err
		}
		if t := byTable[table]; t != nil {
			t.Indexes = append(t.Indexes, ix)
		}
	}
	return rows.Err()
}

// readOldestTransaction finds the client session of this database whose
// transaction began first among those holding back the horizon, else
// among all; other databases' transactions do not hold back vacuum of this
// one's tables.
func readOldestTransaction(ctx context.Context, tx pgx.Tx, h *DatabaseHealth) error {
	var t OpenTransaction
	err := tx.QueryRow(ctx, `
		SELECT pid, coalesce(application_name, ''), coalesce(usename, ''), coalesce(state, ''),
		       xact_start, query_start, extract(epoch FROM now() - xact_start)::float8,
		       backend_xid IS NOT NULL OR backend_xmin IS NOT NULL,
		       greatest(age(backend_xid), age(backend_xmin))::bigint,
		       coalesce(wait_event_type || ': ' || wait_event, ''), left(coalesce(query, ''), $1)
		  FROM pg_stat_activity
		 WHERE datname = current_database() AND backend_type = 'client backend'
		   AND xact_start IS NOT NULL AND pid <> pg_backend_pid()
		 ORDER BY backend_xid IS NULL AND backend_xmin IS NULL, xact_start LIMIT 1`, queryTextMax).
		Scan(&t.PID, &t.Application, &t.User, &t.State, &t.XactStart, &t.QueryStart, &t.AgeSeconds,
			&t.HoldsHorizon, &t.XidAge, &t.WaitEvent, &t.Query)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	h.OldestTransaction = &t
	return nil
}

func readPrepared(ctx context.Context, tx pgx.Tx, h *DatabaseHealth) error {
	rows, err := tx.Query(ctx, `
		SELECT gid, owner, prepared, extract(epoch FROM now() - prepared)::float8, age(transaction)::bigint
		  FROM pg_prepared_xacts WHERE database = current_database()
		 ORDER BY prepared LIMIT $1`, maxSlotsListed)
	if err != nil {
		return err
	}
	h.PreparedTransactions, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (PreparedTransaction, error) {
		var p PreparedTransaction
		return p, r.Scan(&p.GID, &p.Owner, &p.Prepared, &p.AgeSeconds, &p.XidAge)
	})
	return err
}

func readSlots(ctx context.Context, tx pgx.Tx, h *DatabaseHealth) error {
	rows, err := tx.Query(ctx, `
		SELECT slot_name, slot_type, coalesce(database, ''), active, age(xmin)::bigint, age(catalog_xmin)::bigint,
		       pg_wal_lsn_diff(`+currentLSN(h)+`, restart_lsn)::bigint, coalesce(wal_status, '')
		  FROM pg_replication_slots ORDER BY slot_name LIMIT $1`, maxSlotsListed)
	if err != nil {
		return err
	}
	h.ReplicationSlots, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (ReplicationSlot, error) {
		var s ReplicationSlot
		return s, r.Scan(&s.Slot, &s.Type, &s.Database, &s.Active, &s.XidAge, &s.CatalogXidAge, &s.RetainedWALBytes, &s.WALStatus)
	})
	return err
}

// readConnections counts client sessions. A role without pg_read_all_stats
// (pg_monitor) sees other roles' sessions without their state or backend
// type: those with a database are counted as hidden client sessions (an
// autovacuum worker among them too, as that role cannot tell).
func readConnections(ctx context.Context, tx pgx.Tx, h *DatabaseHealth) error {
	rows, err := tx.Query(ctx, `
		SELECT datname IS NOT DISTINCT FROM current_database(), coalesce(application_name, ''),
		       coalesce(state, 'hidden'), count(*)
		  FROM pg_stat_activity
		 WHERE backend_type = 'client backend' OR (backend_type IS NULL AND datname IS NOT NULL)
		 GROUP BY 1, 2, 3`)
	if err != nil {
		return err
	}
	defer rows.Close()
	c := &h.Connections
	byState := map[string]int64{}
	byApp := map[string]*AppConnections{}
	for rows.Next() {
		var here bool
		var app, state string
		var n int64
		if err := rows.Scan(&here, &app, &state, &n); err != nil {
			return err
		}
		c.Total += n
		byState[state] += n
		if state == "hidden" {
			c.Hidden += n
		}
		if !here {
			continue
		}
		a := byApp[app]
		if a == nil {
			a = &AppConnections{Application: app, Queenside: app == applicationName || strings.HasPrefix(app, applicationName+"/")}
			byApp[app] = a
		}
		a.Total += n
		switch state {
		case "active":
			a.Active += n
		case "idle":
			a.Idle += n
		case "idle in transaction", "idle in transaction (aborted)":
			a.IdleInTransaction += n
		default:
			a.Other += n
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	c.ByState = []StateCount{}
	for state, n := range byState {
		c.ByState = append(c.ByState, StateCount{state, n})
	}
	sort.Slice(c.ByState, func(i, j int) bool {
		a, b := c.ByState[i], c.ByState[j]
		return a.Count > b.Count || a.Count == b.Count && a.State < b.State
	})
	c.ByApplication = []AppConnections{}
	for _, a := range byApp {
		c.ByApplication = append(c.ByApplication, *a)
	}
	sort.Slice(c.ByApplication, func(i, j int) bool {
		a, b := c.ByApplication[i], c.ByApplication[j]
		return a.Total > b.Total || a.Total == b.Total && a.Application < b.Application
	})
	if c.Hidden > 0 {
		h.Notes = append(h.Notes, fmt.Sprintf("%d sessions belong to other roles, whose state, transactions and queries "+
			"this role may not see: grant it pg_monitor to see them.", c.Hidden))
	}
	return nil
}

// readReplication reads the standbys streaming from this server and, on a
// standby, its own replay.
func readReplication(ctx context.Context, tx pgx.Tx, h *DatabaseHealth) error {
	rows, err := tx.Query(ctx, `
		SELECT coalesce(application_name, ''), coalesce(host(client_addr), 'local'), coalesce(state, ''),
		       coalesce(sync_state, ''), extract(epoch FROM write_lag)::float8, extract(epoch FROM flush_lag)::float8,
		       extract(epoch FROM replay_lag)::float8, pg_wal_lsn_diff(`+currentLSN(h)+`, replay_lsn)::bigint
		  FROM pg_stat_replication ORDER BY 1, 2 LIMIT $1`, maxSlotsListed)
	if err != nil {
		return err
	}
	h.Standbys, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Standby, error) {
		var s Standby
		return s, r.Scan(&s.Application, &s.ClientAddr, &s.State, &s.SyncState,
			&s.WriteLagSeconds, &s.FlushLagSeconds, &s.ReplayLagSeconds, &s.ReplayLagBytes)
	})
	if err != nil || !h.InRecovery {
		return err
	}
	var r Replay
	err = tx.QueryRow(ctx, `
		SELECT pg_last_xact_replay_timestamp(), extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8,
		       pg_wal_lsn_diff(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn())::bigint,
		       coalesce(pg_last_wal_receive_lsn() <= pg_last_wal_replay_lsn(), false)`).
		Scan(&r.LastReplayAt, &r.SecondsSince, &r.BytesBehind, &r.CaughtUp)
	h.Replay = &r
	return err
}
