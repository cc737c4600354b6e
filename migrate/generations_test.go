package migrate_test

import (
	"context"
	"testing"
)

// Migration 00006 makes inbox a ring of three generation partitions (slot = generation % 3). Up
// keeps every row, with its id, in generation 0; ids continue after the identity sequence's last
// value; inbox_rotate retires generations and keeps pending, claimed, dead and unexpired rows (dead
// letters keep their seq). Down keeps one row per key, the live one, and restores the identity
// column, the keys and the dead-letter triggers of version 5.
func TestMigration6GenerationsKeepRows(t *testing.T) {
	t.Parallel()
	m, c, exec := atVersion(t, 5)
	ctx := context.Background()
	query := func(sql string) string {
		t.Helper()
		var s string
		if err := c.QueryRow(ctx, sql).Scan(&s); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return s
	}
	// Every column of version 5, in its order: what must survive each step.
	const cols = `id, consumer, key, kind, payload, raw, headers, fingerprint, ordering_key, state, attempts_started,
		attempts_failed, next_run_at, owner, lease_until, token, last_error, received_at, started_at, completed_at, expires_at, result`
	rows := func(where string) string {
		return query(`SELECT coalesce(string_agg(r::text, E'\n' ORDER BY r.id), '') FROM (SELECT ` + cols + ` FROM inbox WHERE ` + where + `) r`)
	}
	exec(`INSERT INTO inbox (consumer, key, kind, payload, fingerprint, state, attempts_started, attempts_failed, last_error, completed_at, expires_at)
	      VALUES ('a', 'pending', 'k', '{}', '\x00', 'pending', 0, 0, NULL, NULL, NULL),
	             ('b', 'claimed', 'k', '{}', '\x00', 'pending', 1, 0, NULL, NULL, NULL),
	             ('a', 'dead',    'k', '{}', '\x00', 'dead',    2, 2, 'fatal', '2026-01-05', NULL),
	             ('a', 'window',  'k', '{}', '\x00', 'completed', 1, 0, NULL, now(), now() + interval '1 day'),
	             ('b', 'expired', 'k', '{}', '\x00', 'completed', 1, 0, NULL, now() - interval '2 days', now() - interval '1 day')`)
	exec(`INSERT INTO inbox_queue (id, consumer, run_at, claimed, token, attempts_started, owner)
	      SELECT id, consumer, now(), key = 'claimed', attempts_started, attempts_started, CASE WHEN key = 'claimed' THEN 'w1' END
	      FROM inbox WHERE state = 'pending'`)
	exec(`SELECT nextval('inbox_id_seq') FROM generate_series(1, 10)`) // ids drawn and not stored
	nextID := query(`SELECT (last_value + 1)::text FROM inbox_id_seq`)
	before, queue, dead := rows("true"), query(`SELECT string_agg(q::text, ',' ORDER BY q.id) FROM inbox_queue q`), query(`SELECT string_agg(d::text, ',') FROM inbox_dead d`)

	if _, err := m.UpTo(ctx, 6); err != nil {
		t.Fatal(err)
	}
	if got := rows("slot = 0"); got != before {
		t.Fatalf("rows changed going up:\n%s\n%s", before, got)
	}
	if got := query(`SELECT string_agg(row(consumer, gen)::text, ',' ORDER BY consumer) || ' ring ' || (SELECT gen FROM inbox_ring) FROM inbox_gen`); got != "(a,0),(b,0) ring 0" {
		t.Fatalf("generations after up: %s", got)
	}
	if got := query(`SELECT string_agg(c.conname || ' ' || pg_get_constraintdef(c.oid), '; ' ORDER BY c.conname) FROM pg_constraint c
		WHERE c.conrelid = 'inbox'::regclass AND c.contype IN ('p', 'u')`); got != "inbox_consumer_key UNIQUE (consumer, key, slot); inbox_pkey PRIMARY KEY (id, consumer, slot)" {
		t.Fatalf("keys after up: %s", got)
	}
	if got := query(`INSERT INTO inbox (consumer, key, kind, payload, fingerprint) VALUES ('c', 'new', 'k', '{}', '\x00') RETURNING id::text`); got != nextID {
		t.Fatalf("first id after up = %s, want %s (after the identity's last value)", got, nextID)
	}
	exec(`DELETE FROM inbox WHERE consumer = 'c'`)

	// Generation 1 retires the empty slot 2; generation 2 retires slot 0, keeping all but the expired
	// row, in slot 2, with everything they held; the dead letter keeps its seq.
	for _, want := range []string{"(t,1,0,f)", "(t,2,4,f)"} {
		if got := query(`SELECT r::text FROM inbox_rotate(NULL) r`); got != want {
			t.Fatalf("rotation: %s, want %s", got, want)
		}
	}
	if got, want := rows("slot = 2"), rows("true"); got != want || got == "" {
		t.Fatalf("rows outside slot 2 after two rotations:\n%s", query(`SELECT string_agg(row(id, slot)::text, ',') FROM inbox`))
	}
	kept := rows("true")
	if got := query(`SELECT string_agg(key, ',' ORDER BY id) FROM inbox`); got != "pending,claimed,dead,window" {
		t.Fatalf("kept %s, want all but the expired row", got)
	}
	if got := query(`SELECT string_agg(q::text, ',' ORDER BY q.id) FROM inbox_queue q`); got != queue {
		t.Fatalf("queue changed by rotations:\n%s\n%s", queue, got)
	}
	if got := query(`SELECT string_agg(d::text, ',') FROM inbox_dead d`); got != dead {
		t.Fatalf("dead letters changed by rotations:\n%s\n%s", dead, got)
	}
	// A key received again after its window: the expired row stays in an older slot beside the new
	// one until its slot is retired. Down keeps the live one.
	exec(`INSERT INTO inbox (slot, consumer, key, kind, payload, fingerprint, state, completed_at, expires_at)
	      VALUES (2, 'b', 'again', 'k', '{"old": true}', '\x00', 'completed', now() - interval '2 days', now() - interval '1 day'),
	             (0, 'b', 'again', 'k', '{"new": true}', '\x00', 'pending', NULL, NULL)`)
	again := rows("key = 'again' AND state = 'pending'")
	nextID = query(`SELECT (last_value + 1)::text FROM inbox_id_seq`)

	if _, err := m.DownTo(ctx, 5); err != nil {
		t.Fatal(err)
	}
	if got, want := rows("true"), kept+"\n"+again; got != want {
		t.Fatalf("rows after down:\n got %s\nwant %s", got, want)
	}
	if got := query(`SELECT string_agg(c.conname || ' ' || pg_get_constraintdef(c.oid), '; ' ORDER BY c.conname) FROM pg_constraint c
		WHERE c.conrelid = 'inbox'::regclass AND c.contype IN ('p', 'u')`); got != "inbox_consumer_key UNIQUE (consumer, key); inbox_pkey PRIMARY KEY (id, consumer)" {
		t.Fatalf("keys after down: %s", got)
	}
	if got := query(`INSERT INTO inbox (consumer, key, kind, payload, fingerprint) VALUES ('c', 'down', 'k', '{}', '\x00') RETURNING id::text`); got != nextID {
		t.Fatalf("first id after down = %s, want %s (after the sequence's last value)", got, nextID)
	}
	// Version 5's triggers: a replayed and killed message keeps one dead row.
	exec(`UPDATE inbox SET state = 'pending' WHERE key = 'dead'`)
	exec(`UPDATE inbox SET state = 'dead' WHERE key = 'dead'`)
	if got := query(`SELECT count(*)::text FROM inbox_dead`); got != "1" {
		t.Fatalf("dead rows after down, replay and death: %s", got)
	}
	// And up again.
	if _, err := m.UpTo(ctx, 6); err != nil {
		t.Fatal(err)
	}
	if got := query(`SELECT count(*)::text FROM inbox WHERE slot = 0`); got != "6" {
		t.Fatalf("rows after up again: %s, want 6", got)
	}
}
