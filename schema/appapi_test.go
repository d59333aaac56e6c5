package schema_test

import (
	"context"
	"testing"

	"github.com/queenside/queenside/schema"
)

// The SQL API applications call in their own transactions (migrations 14
// and 15, README "Inside your own transaction") is kept for good: later
// migrations may add to it, never change what these calls take or answer.
// This list is the contract; a migration that breaks it fails here.
var applicationAPI = map[string]string{
	"queenside.send(text,bytea,text,text,jsonb,text)":      "status text, offset bigint, message_id uuid, transaction_id text",
	"queenside.send_json(text,jsonb,text,text,jsonb,text)": "status text, offset bigint, message_id uuid, transaction_id text",
	"queenside.ack_message(text,bigint,text,text,text)":    "success boolean, code text, dead_lettered boolean",
	"queenside.msgpack(jsonb)":                             "bytea",
	// Migration 15.
	"queenside.send_batch(text,bytea[],text[],text[],jsonb[],text[])":      "status text, offset bigint, message_id uuid, transaction_id text",
	"queenside.send_json_batch(text,jsonb[],text[],text[],jsonb[],text[])": "status text, offset bigint, message_id uuid, transaction_id text",
	"queenside.send_max_message_bytes()":                                   "integer",
}

func TestTheApplicationAPIIsKept(t *testing.T) {
	ctx := context.Background()
	conn := connect(t, emptyDatabase(t))
	if err := schema.Migrate(ctx, conn); err != nil {
		t.Fatal(err)
	}
	for signature, result := range applicationAPI {
		var got string
		err := conn.QueryRow(ctx, `SELECT coalesce(
			(SELECT string_agg(n || ' ' || format_type(ty, NULL), ', ' ORDER BY o)
			   FROM unnest(p.proargnames, p.proallargtypes::oid[], p.proargmodes::text[]) WITH ORDINALITY AS a (n, ty, m, o)
			  WHERE m IN ('o', 't')),
			format_type(p.prorettype, NULL))
			FROM pg_proc p WHERE p.oid = $1::regprocedure`, signature).Scan(&got)
		if err != nil {
			t.Errorf("%s: %v", signature, err)
			continue
		}
		if got != result {
			t.Errorf("%s answers (%s), want (%s)", signature, got, result)
		}
	}
}
