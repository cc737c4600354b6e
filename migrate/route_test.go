package migrate_test

import (
	"context"
	"testing"
)

// Migration 00005 puts consumer into every key of the tables that hold messages (so that a table
// distributed by consumer accepts them), with messages in flight: going up keeps every row, the keys
// contain consumer, and the dead-letter trigger keeps working on the new key of inbox_dead; going down
// gives the keys of version 4 back with the same rows.
func TestMigration5KeysContainConsumer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m, c, exec := atVersion(t, 4)
	query := func(sql string) string {
		t.Helper()
		var s string
		if err := c.QueryRow(ctx, sql).Scan(&s); err != nil {
			t.Fatalf("%v\n%s", err, sql)
		}
		return s
	}
	keys := func() string {
		return query(`SELECT string_agg(conrelid::regclass::text || ' ' || pg_get_constraintdef(oid), '; ' ORDER BY conname)
			FROM pg_constraint WHERE contype IN ('p', 'u') AND connamespace = current_schema()::regnamespace
			AND conrelid::regclass::text IN ('inbox', 'inbox_queue', 'inbox_dead')`)
	}
	rows := func() string {
		return query(`SELECT concat_ws(' | ',
			(SELECT string_agg(row(id, consumer, key, state, token)::text, ',' ORDER BY id) FROM inbox),
			(SELECT string_agg(row(id, consumer, claimed, token)::text, ',' ORDER BY id) FROM inbox_queue),
			(SELECT string_agg(row(seq, id, consumer, error)::text, ',' ORDER BY seq) FROM inbox_dead))`)
	}

	// Version 4: a pending, a claimed and a dead message of two consumers.
	exec(`INSERT INTO inbox (id, consumer, key, kind, payload, fingerprint, state, token, last_error, completed_at)
	      OVERRIDING SYSTEM VALUE VALUES
	      (1, 'a', 'pending', 'k', '{}', '\x00', 'pending', 0, NULL, NULL),
	      (2, 'b', 'claimed', 'k', '{}', '\x00', 'pending', 1, NULL, NULL),
	      (3, 'a', 'dead',    'k', '{}', '\x00', 'dead',    2, 'fatal', '2026-01-05')`)
	exec(`INSERT INTO inbox_queue (id, consumer, run_at, claimed, token, attempts_started, owner)
	      VALUES (1, 'a', '2026-01-01', false, 0, 0, NULL), (2, 'b', '2099-01-01', true, 2, 2, 'w1')`)
	before, keys4 := rows(), keys()

	if _, err := m.UpTo(ctx, 5); err != nil {
		t.Fatal(err)
	}
	if got := rows(); got != before {
		t.Fatalf("rows changed going up:\n%s\n%s", before, got)
	}
	want := "inbox UNIQUE (consumer, key); inbox_dead UNIQUE (id, consumer); inbox_dead PRIMARY KEY (seq, consumer); " +
		"inbox PRIMARY KEY (id, consumer); inbox_queue PRIMARY KEY (id, consumer)"
	if got := keys(); got != want {
		t.Fatalf("keys after 00005:\n got %s\nwant %s", got, want)
	}
	// The trigger follows the new key: replaying and killing a message again keeps one dead row.
	exec(`UPDATE inbox SET state = 'pending' WHERE id = 3`)
	exec(`UPDATE inbox SET state = 'dead', last_error = 'again' WHERE id = 3`)
	exec(`UPDATE inbox SET state = 'dead' WHERE id = 3`)
	if got := query(`SELECT string_agg(row(id, consumer, error)::text, ',') FROM inbox_dead`); got != "(3,a,again)" {
		t.Fatalf("dead letters after replay and death: %s", got)
	}
	after := rows()

	if _, err := m.DownTo(ctx, 4); err != nil {
		t.Fatal(err)
	}
	if got := rows(); got != after {
		t.Fatalf("rows changed going down:\n%s\n%s", after, got)
	}
	if got := keys(); got != keys4 {
		t.Fatalf("keys after going down:\n got %s\nwant %s", got, keys4)
	}
	exec(`UPDATE inbox SET state = 'pending' WHERE id = 3`)
	exec(`UPDATE inbox SET state = 'dead' WHERE id = 3`)
	if got := query(`SELECT count(*)::text FROM inbox_dead WHERE id = 3`); got != "1" {
		t.Fatalf("version 4's trigger: %s dead rows", got)
	}
}
