package migrate_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/migrate"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// Migration 00004 moves the claim state of queued messages (owner, token, attempts started, start of
// the attempt) from inbox into inbox_queue and back, with messages in every state in flight: going up
// and down again gives back exactly the rows stored by version 3, and going up again the same rows as
// the first time.
func TestMigration4MovesClaimsWithData(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m, c, exec := atVersion(t, 3)
	// Version 3's layout: a claim is state processing in inbox, with its owner, token, attempts and
	// lease there; the queue row holds the same token and the lease as run_at.
	exec(`INSERT INTO inbox (id, consumer, key, kind, payload, fingerprint, state, attempts_started, attempts_failed,
	          next_run_at, owner, lease_until, token, last_error, started_at, completed_at, expires_at, result)
	      OVERRIDING SYSTEM VALUE VALUES
	      (1, 'c', 'pending',  'k', '{}', '\x00', 'pending',    0, 0, '2026-01-01', NULL, NULL, 0, NULL, NULL, NULL, NULL, NULL),
	      (2, 'c', 'claimed',  'k', '{}', '\x00', 'processing', 2, 1, '2026-01-01', 'w1', '2099-01-01 00:00:00+00', 3, 'first', '2026-01-02', NULL, NULL, NULL),
	      (3, 'c', 'retrying', 'k', '{}', '\x00', 'pending',    1, 1, '2099-01-01', NULL, NULL, 1, 'boom', '2026-01-03', NULL, NULL, NULL),
	      (4, 'c', 'dead',     'k', '{}', '\x00', 'dead',       3, 3, '2026-01-01', NULL, NULL, 3, 'fatal', '2026-01-04', '2026-01-05', NULL, NULL),
	      (5, 'c', 'done',     'k', '{}', '\x00', 'completed',  1, 0, '2026-01-01', NULL, NULL, 1, NULL, '2026-01-06', '2026-01-07', '2099-01-01', '{"ok": true}')`)
	exec(`INSERT INTO inbox_queue (id, consumer, run_at, claimed, token) VALUES
	      (1, 'c', '2026-01-01', false, 0),
	      (2, 'c', '2099-01-01 00:00:00+00', true, 3),
	      (3, 'c', '2099-01-01', false, 1)`)
	snapshot := func() string {
		t.Helper()
		var s string
		err := c.QueryRow(ctx, `SELECT (SELECT string_agg(m::text, E'\n' ORDER BY m.id) FROM inbox m) || E'\n--\n' ||
			(SELECT string_agg(q::text, E'\n' ORDER BY q.id) FROM inbox_queue q)`).Scan(&s)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	v3 := snapshot()

	if _, err := m.UpTo(ctx, 4); err != nil {
		t.Fatal(err)
	}
	type claim struct {
		state, owner         string
		token                int64
		started, qStarted    int
		qOwner, qStartedAt   string
		qClaimed, inboxLease bool
	}
	read := func(id int64) (cl claim) {
		t.Helper()
		err := c.QueryRow(ctx, `SELECT m.state, coalesce(m.owner, ''), q.token, m.attempts_started, q.attempts_started,
			coalesce(q.owner, ''), coalesce(q.started_at::date::text, ''), q.claimed, m.lease_until IS NOT NULL
			FROM inbox m JOIN inbox_queue q ON q.id = m.id WHERE m.id = $1`, id).Scan(&cl.state, &cl.owner, &cl.token,
			&cl.started, &cl.qStarted, &cl.qOwner, &cl.qStartedAt, &cl.qClaimed, &cl.inboxLease)
		if err != nil {
			t.Fatalf("message %d: %v", id, err)
		}
		return cl
	}
	// The claim is in the queue row now; its inbox row is pending, as the finish will leave it.
	if got, want := read(2), (claim{state: "pending", token: 3, started: 2, qStarted: 2, qOwner: "w1", qStartedAt: "2026-01-02", qClaimed: true}); got != want {
		t.Errorf("claimed message after up: %+v, want %+v", got, want)
	}
	if got, want := read(3), (claim{state: "pending", token: 1, started: 1, qStarted: 1, qStartedAt: "2026-01-03"}); got != want {
		t.Errorf("retrying message after up: %+v, want %+v", got, want)
	}
	if got, want := read(1), (claim{state: "pending"}); got != want {
		t.Errorf("pending message after up: %+v, want %+v", got, want)
	}
	v4 := snapshot()
	for _, id := range []string{"(4,", "(5,"} { // dead and completed: untouched
		if line(v3, id) != line(v4, id) {
			t.Errorf("message %s changed by up:\n%s\n%s", id, line(v3, id), line(v4, id))
		}
	}

	if _, err := m.DownTo(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if got := snapshot(); got != v3 {
		t.Errorf("down did not restore version 3's rows:\n got %s\nwant %s", got, v3)
	}
	if _, err := m.UpTo(ctx, 4); err != nil {
		t.Fatal(err)
	}
	if got := snapshot(); got != v4 {
		t.Errorf("up again:\n got %s\nwant %s", got, v4)
	}
}

// line returns the line of s that starts with prefix.
func line(s, prefix string) string {
	for l := range strings.SplitSeq(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

// atVersion migrates a new schema up, then down to version, and returns its Migrator, a connection
// with search_path set to the schema, and exec, which runs a statement on it or fails t.
func atVersion(t *testing.T, version int64) (*migrate.Migrator, *pgx.Conn, func(sql string)) {
	t.Helper()
	schema, url := testdb.NewSchema(t)
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	m, err := migrate.New(ctx, cfg, txinbox.Store{Schema: schema}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := m.DownTo(ctx, version); err != nil {
		t.Fatal(err)
	}
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(ctx) })
	if _, err := c.Exec(ctx, "SET search_path = "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	return m, c, func(sql string) {
		t.Helper()
		if _, err := c.Exec(ctx, sql); err != nil {
			t.Fatalf("%v\n%s", err, sql)
		}
	}
}
