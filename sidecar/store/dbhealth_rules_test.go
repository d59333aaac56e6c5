package store

import (
	"reflect"
	"testing"
	"time"
)

func TestDatabaseHealthRules(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) *time.Time { at := now.Add(-d); return &at }
	i64 := func(n int64) *int64 { return &n }
	f64 := func(n float64) *float64 { return &n }
	cases := []struct {
		name string
		in   DatabaseHealth
		want []Problem
	}{
		{"nothing wrong", DatabaseHealth{
			At:                   now,
			OldestTransaction:    &OpenTransaction{PID: 7, AgeSeconds: 59, HoldsHorizon: true},
			PreparedTransactions: []PreparedTransaction{{GID: "g", AgeSeconds: 10}},
			ReplicationSlots:     []ReplicationSlot{{Slot: "s", Active: true, XidAge: i64(9_999_999), RetainedWALBytes: i64(2 << 30)}},
			Tables: []TableHealth{
				{Table: "segments", DeadTuples: 9_999, DeadPercent: 90},
				{Table: "cursors", DeadTuples: 50_000, DeadPercent: 19.9},
				{Table: "partitions", DeadTuples: 400_000, DeadPercent: 98, LastAutovacuum: ago(9 * time.Minute)},
				{Table: "dedup", DeadTuples: 400_000, DeadPercent: 98, LastVacuum: ago(time.Minute), LastAutovacuum: ago(time.Hour)},
			},
			Connections: Connections{Max: 100, Reserved: 3, Total: 77},
			Standbys:    []Standby{{Application: "replica", ReplayLagSeconds: f64(29), ReplayLagBytes: i64(1<<30 - 1)}},
			Replay:      &Replay{CaughtUp: true, SecondsSince: f64(3600)},
		}, []Problem{}},
		{"a transaction holding the horizon for long", DatabaseHealth{
			OldestTransaction: &OpenTransaction{PID: 4242, Application: "psql", State: "idle in transaction", AgeSeconds: 41*60 + 5, HoldsHorizon: true},
		}, []Problem{{"critical", "transaction", "4242",
			`A transaction open for 41 min holds back vacuum of the queue tables (pid 4242, "psql", idle in transaction).`}}},
		{"a transaction open for a minute", DatabaseHealth{
			OldestTransaction: &OpenTransaction{PID: 9, State: "active", AgeSeconds: 65, HoldsHorizon: true},
		}, []Problem{{"warning", "transaction", "9",
			`A transaction open for 1 min holds back vacuum of the queue tables (pid 9, no application name, active).`}}},
		{"a transaction without a snapshot", DatabaseHealth{
			OldestTransaction: &OpenTransaction{PID: 5, Application: "app", State: "idle in transaction", AgeSeconds: 2 * 3600},
		}, []Problem{{"warning", "transaction", "5",
			`A transaction open for 2 h holds its locks and a connection (pid 5, "app", idle in transaction).`}}},
		{"a prepared transaction", DatabaseHealth{
			PreparedTransactions: []PreparedTransaction{{GID: "citus_0_1", AgeSeconds: 600, XidAge: 12_345}},
		}, []Problem{{"warning", "prepared", "citus_0_1",
			`Prepared transaction "citus_0_1", prepared 10 min ago and neither committed nor rolled back, holds back vacuum of the queue tables by 12 k transactions.`}}},
		{"slots", DatabaseHealth{
			ReplicationSlots: []ReplicationSlot{
				{Slot: "gone", XidAge: i64(2_100_000), RetainedWALBytes: i64(3 << 30)},
				{Slot: "busy", Active: true, XidAge: i64(10_000_000)},
				{Slot: "cdc", CatalogXidAge: i64(512)},
			},
		}, []Problem{
			{"critical", "slot", "gone", "Replication slot gone is not in use and holds back vacuum of the queue tables by 2.1 M transactions: drop it if its standby is gone."},
			{"warning", "slot", "gone", "Replication slot gone is not in use and keeps 3.0 GiB of WAL on the server's disk."},
			{"warning", "slot", "busy", "Replication slot busy holds back vacuum of the queue tables by 10 M transactions (a long query on its standby, with hot_standby_feedback)."},
			{"warning", "slot", "cdc", "Replication slot cdc is not in use and holds back vacuum of the system catalogs by 512 transactions."},
		}},
		{"dead tuples", DatabaseHealth{
			At: now,
			Tables: []TableHealth{
				{Table: "segments", DeadTuples: 2_100_000, DeadPercent: 38.2, LastAutovacuum: ago(3 * time.Hour)},
				{Table: "cursors", DeadTuples: 60_000, DeadPercent: 75},
			},
		}, []Problem{
			{"critical", "table", "cursors", "cursors has 60 k dead tuples (75 %), never autovacuumed."},
			{"warning", "table", "segments", "segments has 2.1 M dead tuples (38 %), last autovacuum 3 h ago."},
		}},
		{"connections", DatabaseHealth{Connections: Connections{Max: 103, Reserved: 3, Total: 96}},
			[]Problem{{"critical", "connections", "",
				"96 of the 100 connections open to every role are in use (96 %): a new sidecar or a growing pool may be refused."}}},
		{"a standby behind", DatabaseHealth{Standbys: []Standby{
			{Application: "walreceiver", ClientAddr: "10.0.0.5", ReplayLagSeconds: f64(45), ReplayLagBytes: i64(120 << 20)},
			{Application: "far", ClientAddr: "10.0.0.6", ReplayLagSeconds: f64(1), ReplayLagBytes: i64(2 << 30)},
		}}, []Problem{
			{"warning", "standby", "walreceiver", `Standby "walreceiver" (10.0.0.5) replays 45 s behind this server (120 MiB of WAL).`},
			{"warning", "standby", "far", `Standby "far" (10.0.0.6) replays 1 s behind this server (2.0 GiB of WAL).`},
		}},
		{"this standby behind", DatabaseHealth{InRecovery: true, Replay: &Replay{SecondsSince: f64(400)}},
			[]Problem{{"critical", "replay", "",
				"This server is a standby that has not caught up with its primary: the last transaction it replayed committed 6 min ago."}}},
	}
	for _, c := range cases {
		if got := healthProblems(c.in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\n got %#v\nwant %#v", c.name, got, c.want)
		}
	}
}

func TestRoughFigures(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 9_876: "9,876", 12_345: "12 k", 2_100_000: "2.1 M", 1_300_000_000: "1.3 G"} {
		if got := roughCount(n); got != want {
			t.Errorf("roughCount(%d) = %q, want %q", n, got, want)
		}
	}
	for n, want := range map[int64]string{512: "512 B", 3_565_158: "3.4 MiB", 12 << 30: "12 GiB"} {
		if got := roughBytes(n); got != want {
			t.Errorf("roughBytes(%d) = %q, want %q", n, got, want)
		}
	}
	for d, want := range map[time.Duration]string{-time.Second: "0 s", 45 * time.Second: "45 s", 41 * time.Minute: "41 min",
		3 * time.Hour: "3 h", 3*time.Hour + 5*time.Minute: "3 h 5 min", 52 * time.Hour: "2 d 4 h"} {
		if got := roughDuration(d); got != want {
			t.Errorf("roughDuration(%v) = %q, want %q", d, got, want)
		}
	}
}
