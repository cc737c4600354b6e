package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/admin"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/migrations"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

var binary string

// TestMain builds the txinbox binary once; every test runs it as an operator would.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "txinbox-cli")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "txinbox")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type result struct {
	stdout, stderr string
	code           int
}

// cli runs the binary with args, DATABASE_URL set to databaseURL (unset when empty).
func cli(t *testing.T, databaseURL string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	env := []string{}
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "DATABASE_URL=") {
			env = append(env, e)
		}
	}
	if databaseURL != "" {
		env = append(env, "DATABASE_URL="+databaseURL)
	}
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("txinbox %v: %v", args, err)
	}
	return r
}

// want fails t unless the exit status is code and stdout and stderr each contain their text; an
// empty text asserts that the stream is empty.
func (r result) want(t *testing.T, code int, stdoutHas, stderrHas string) {
	t.Helper()
	has := func(out, text string) bool {
		if text == "" {
			return out == ""
		}
		return strings.Contains(out, text)
	}
	if r.code != code || !has(r.stdout, stdoutHas) || !has(r.stderr, stderrHas) {
		show := func(text string) string {
			if text == "" {
				return "empty"
			}
			return fmt.Sprintf("%q", text)
		}
		t.Fatalf("exit %d (want %d)\nstdout (want %s):\n%s\nstderr (want %s):\n%s", r.code, code, show(stdoutHas), r.stdout, show(stderrHas), r.stderr)
	}
}

func decode[T any](t *testing.T, r result) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatalf("output is not JSON (%v):\n%s\nstderr: %s", err, r.stdout, r.stderr)
	}
	return v
}

func TestMigrate(t *testing.T) {
	t.Parallel()
	schema, url := testdb.NewSchema(t)
	cli(t, url, "migrate", "status", "--schema", schema).want(t, 0, "pending", "")
	cli(t, url, "--schema", schema, "migrate", "up").want(t, 0, "applied 00001_inbox.sql", "")
	cli(t, url, "--schema", schema, "migrate", "up").want(t, 0, "up to date", "")
	st := decode[[]struct {
		Version int64
		Name    string
		Applied bool
	}](t, cli(t, url, "migrate", "status", "--schema", schema, "--json"))
	if len(st) == 0 || st[0].Version != 1 || !st[0].Applied {
		t.Fatalf("status: %+v", st)
	}
	// Roll everything back, one version per call.
	for range st {
		cli(t, url, "migrate", "down", "--schema", schema).want(t, 0, "rolled back", "")
	}
	st = decode[[]struct {
		Version int64
		Name    string
		Applied bool
	}](t, cli(t, url, "migrate", "status", "--schema", schema, "--json"))
	for _, m := range st {
		if m.Applied {
			t.Fatalf("still applied after rolling back: %+v", st)
		}
	}
	cli(t, url, "migrate", "sideways", "--schema", schema).want(t, 2, "", `unknown sub-command "migrate sideways"`)
	cli(t, url, "migrate").want(t, 2, "", "needs a sub-command: up, down, status")
}

// seed receives messages into a migrated schema and gives them states as the worker would.
func seed(t *testing.T) (*testdb.DB, map[string]int64) {
	t.Helper()
	return seedOn(t, testdb.New(t))
}

// seedOn is seed on db.
func seedOn(t *testing.T, db *testdb.DB) (*testdb.DB, map[string]int64) {
	t.Helper()
	c, err := inbox.New(db.Store(), inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ids := map[string]int64{}
	for _, m := range []inbox.Message{
		{Consumer: "ledger", Key: "p1", Kind: "OrderPaid", Payload: []byte(`{"amount":1}`)},
		{Consumer: "ledger", Key: "c1", Kind: "OrderPaid", Payload: []byte(`{"amount":2}`)},
		{Consumer: "ledger", Key: "d1", Kind: "OrderPaid", Payload: []byte(`{"amount":3}`)},
		{Consumer: "ledger", Key: "d2", Kind: "Refund", Payload: []byte(`{"amount":4}`)},
		{Consumer: "audit", Key: "d3", Kind: "Audit", Payload: []byte(`{}`)},
	} {
		r, err := c.Receive(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		ids[m.Key] = r.ID
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, db.SQL(sql), args...); err != nil {
			t.Fatal(err)
		}
	}
	exec(`DELETE FROM {schema}.inbox_queue WHERE id <> $1`, ids["p1"])
	exec(`UPDATE {schema}.inbox SET state = 'completed', completed_at = now() - interval '40 days',
		expires_at = now() + interval '1 day', attempts_started = 1 WHERE id = $1`, ids["c1"])
	for _, key := range []string{"d1", "d2", "d3"} { // one statement each: they die in this order
		exec(`UPDATE {schema}.inbox SET state = 'dead', completed_at = now(), attempts_started = 10, attempts_failed = 10,
			last_error = CASE key WHEN 'd2' THEN 'timeout' ELSE 'insufficient funds' END WHERE id = $1`, ids[key])
	}
	return db, ids
}

func TestStatsJSON(t *testing.T) {
	t.Parallel()
	db, _ := seed(t)
	st := decode[[]map[string]any](t, cli(t, db.URL, "stats", "--schema", db.Schema, "--json"))
	if len(st) != 2 || st[0]["consumer"] != "audit" || st[1]["consumer"] != "ledger" {
		t.Fatalf("stats: %v", st)
	}
	l := st[1]
	if l["pending"] != 1.0 || l["completed"] != 1.0 || l["dead"] != 2.0 || l["processing"] != 0.0 {
		t.Fatalf("ledger stats: %v", l)
	}
	if _, ok := l["oldest_pending_seconds"].(float64); !ok {
		t.Fatalf("no oldest_pending_seconds: %v", l)
	}
	// The table form, with --database-url instead of the environment.
	r := cli(t, "", "--database-url", db.URL, "--schema", db.Schema, "stats")
	r.want(t, 0, "CONSUMER", "")
	if !strings.Contains(r.stdout, "ledger") || !strings.Contains(r.stdout, "audit") {
		t.Fatalf("table:\n%s", r.stdout)
	}
}

// stats shows the tables' dead row versions and the session holding back the xmin horizon; --json
// keeps its array, and --json --health wraps it in an object with admin.Health's fields.
func TestStatsHealth(t *testing.T) {
	t.Parallel()
	db, _ := seedOn(t, testdb.NewInDatabase(t)) // the snapshot holds back the horizon of its database only
	snap := testdb.HoldSnapshot(t, db.URL)
	if _, err := db.Pool.Exec(context.Background(), db.SQL(`DELETE FROM {schema}.inbox_queue`)); err != nil {
		t.Fatal(err)
	}
	type out struct {
		Consumers []admin.ConsumerStats `json:"consumers"`
		admin.Health
	}
	// Statistics are reported within a second or so: wait until the held snapshot is the holder and
	// the delete is counted.
	var h out
	deadline := time.Now().Add(2 * time.Minute)
	for {
		h = decode[out](t, cli(t, db.URL, "stats", "--schema", db.Schema, "--json", "--health"))
		dead := int64(-1)
		for _, tb := range h.Tables {
			if tb.Table == "inbox_queue" {
				dead = tb.DeadRows
			}
		}
		if h.Horizon.Holder != nil && h.Horizon.Holder.PID == snap.PID && dead >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for the held snapshot and a dead queue row: %+v", h)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(h.Consumers) != 2 || h.Consumers[1].Consumer != "ledger" || h.Consumers[1].Dead != 2 || len(h.Tables) != 7 ||
		h.Horizon.Holder.ApplicationName != snap.ApplicationName || h.Horizon.Holder.State != "idle in transaction" {
		t.Fatalf("stats --json --health: %+v", h)
	}
	raw := decode[map[string]any](t, cli(t, db.URL, "stats", "--schema", db.Schema, "--json", "--health"))
	for _, k := range []string{"consumers", "tables", "horizon"} {
		if _, ok := raw[k]; !ok {
			t.Fatalf("stats --json --health lacks %q: %v", k, raw)
		}
	}
	if _, ok := raw["horizon"].(map[string]any)["holder"].(map[string]any)["age_seconds"].(float64); !ok {
		t.Fatalf("no horizon.holder.age_seconds: %v", raw["horizon"])
	}
	// --json alone is still the consumers' array.
	if arr := decode[[]map[string]any](t, cli(t, db.URL, "stats", "--schema", db.Schema, "--json")); len(arr) != 2 {
		t.Fatalf("stats --json: %v", arr)
	}
	r := cli(t, db.URL, "stats", "--schema", db.Schema)
	r.want(t, 0, "DEAD ROWS", "")
	for _, want := range []string{"inbox_queue", "xmin horizon: held by pid", "idle in transaction", "database frozen xid age"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("stats lacks %q:\n%s", want, r.stdout)
		}
	}
}

func TestDeadLetters(t *testing.T) {
	t.Parallel()
	db, ids := seed(t)
	s := db.Schema
	url := db.URL

	r := cli(t, url, "dead", "list", "--schema", s)
	r.want(t, 0, "LAST ERROR", "")
	if strings.Count(r.stdout, "\n") != 4 { // header and three dead letters
		t.Fatalf("list:\n%s", r.stdout)
	}
	list := decode[[]deadLetterJSON](t, cli(t, url, "dead", "list", "--schema", s, "--json", "--consumer", "ledger", "--error", "funds"))
	if len(list) != 1 || list[0].ID != ids["d1"] || list[0].Seq <= 0 || list[0].LastError != "insufficient funds" || list[0].DiedAt.IsZero() {
		t.Fatalf("filtered list: %+v", list)
	}
	list = decode[[]deadLetterJSON](t, cli(t, url, "dead", "list", "--schema", s, "--json", "--limit", "1"))
	if len(list) != 1 || list[0].ID != ids["d3"] {
		t.Fatalf("limited list: %+v, want d3 (the newest)", list)
	}
	cli(t, url, "dead", "list", "--schema", s, "--limit", "1").want(t, 0, "LAST ERROR", fmt.Sprintf("--before %d", list[0].Seq))
	next := decode[[]deadLetterJSON](t, cli(t, url, "dead", "list", "--schema", s, "--json", "--limit", "1", "--before", fmt.Sprint(list[0].Seq)))
	if len(next) != 1 || next[0].ID != ids["d2"] {
		t.Fatalf("next page: %+v, want d2", next)
	}
	cli(t, url, "dead", "list", "--schema", s, "--after", "1").want(t, 2, "", "--before SEQ")
	list = decode[[]deadLetterJSON](t, cli(t, url, "dead", "list", "--schema", s, "--json", "--since", "1h", "--kind", "Nope"))
	if len(list) != 0 {
		t.Fatalf("list of nothing: %+v", list)
	}
	cli(t, url, "dead", "list", "--schema", s, "--since", "yesterday").want(t, 2, "", "--since")

	// show, in both forms; flags after the id work too.
	m := decode[inbox.StoredMessage](t, cli(t, url, "dead", "show", fmt.Sprint(ids["d2"]), "--schema", s, "--json"))
	if m.Key != "d2" || m.Kind != "Refund" || m.LastError != "timeout" || m.AttemptsFailed != 10 {
		t.Fatalf("show: %+v", m)
	}
	cli(t, url, "--schema", s, "dead", "show", fmt.Sprint(ids["d2"])).want(t, 0, "last error:", "")
	cli(t, url, "--schema", s, "dead", "show", "999999").want(t, 1, "", "message 999999 not found")
	cli(t, url, "--schema", s, "dead", "show", "abc").want(t, 2, "", "not a message id")

	// replay one by id; a non-dead id fails the command but the dead one is replayed.
	rep := decode[map[string][]int64](t, cli(t, url, "--schema", s, "--json", "dead", "replay", fmt.Sprint(ids["d1"])))
	if len(rep["replayed"]) != 1 || rep["replayed"][0] != ids["d1"] || len(rep["skipped"]) != 0 {
		t.Fatalf("replay: %v", rep)
	}
	cli(t, url, "--schema", s, "dead", "replay", fmt.Sprint(ids["d1"])).want(t, 1, "skipped 1", "not replayed")
	if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox_queue WHERE id = $1`, ids["d1"]); got != 1 {
		t.Fatal("replayed message not queued")
	}
	cli(t, url, "--schema", s, "dead", "replay").want(t, 2, "", "needs message ids")
	cli(t, url, "--schema", s, "dead", "replay", "--consumer", "audit", "1").want(t, 2, "", "filters only apply with --all")

	// discard everything of consumer audit with --all.
	cli(t, url, "--schema", s, "dead", "discard", "--all", "--consumer", "audit").want(t, 0, "discarded 1 dead letter(s): "+fmt.Sprint(ids["d3"]), "")
	left := decode[[]deadLetterJSON](t, cli(t, url, "dead", "list", "--schema", s, "--json"))
	if len(left) != 1 || left[0].ID != ids["d2"] {
		t.Fatalf("dead letters left: %+v", left)
	}
	// replay --all puts the rest back.
	cli(t, url, "--schema", s, "dead", "replay", "--all").want(t, 0, "replayed 1 dead letter(s)", "")
}

// dead discard with one id deletes that dead letter only; the same id again, or a message that is not
// dead, is not discarded (exit 1) and nothing else changes.
func TestDeadDiscardOne(t *testing.T) {
	t.Parallel()
	db, ids := seed(t)
	s, url := db.Schema, db.URL
	out := decode[map[string][]int64](t, cli(t, url, "--schema", s, "--json", "dead", "discard", fmt.Sprint(ids["d2"])))
	if len(out["discarded"]) != 1 || out["discarded"][0] != ids["d2"] || len(out["skipped"]) != 0 {
		t.Fatalf("discard: %v", out)
	}
	if n := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE id = $1`, ids["d2"]); n != 0 {
		t.Fatal("discarded message still stored")
	}
	if n := db.Count(t, `SELECT count(*) FROM {schema}.inbox`); n != 4 {
		t.Fatalf("%d rows left, want 4", n)
	}
	before := snapshot(t, db)
	cli(t, url, "--schema", s, "dead", "discard", fmt.Sprint(ids["d2"])).want(t, 1, "skipped 1", "not discarded")
	cli(t, url, "--schema", s, "dead", "discard", fmt.Sprint(ids["p1"])).want(t, 1, "skipped 1", "not discarded")
	cli(t, url, "--schema", s, "dead", "discard", fmt.Sprint(ids["c1"])).want(t, 1, "skipped 1", "not discarded")
	cli(t, url, "--schema", s, "dead", "discard", "0").want(t, 2, "", "not a message id")
	if after := snapshot(t, db); after != before {
		t.Fatalf("rows changed: %s -> %s", before, after)
	}
	// The key of the discarded message is free again.
	c, err := inbox.New(txinbox.Store{DB: db.Pool, Schema: s}, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := c.Receive(context.Background(), inbox.Message{Consumer: "ledger", Key: "d2", Kind: "Refund", Payload: []byte(`{"amount":4}`)}); err != nil || r.Outcome != inbox.Inserted {
		t.Fatalf("key of the discarded message: %+v, %v", r, err)
	}
}

// dead list --until lists the dead letters that died before the time, in each accepted form.
func TestDeadListUntil(t *testing.T) {
	t.Parallel()
	db, ids := seed(t)
	// d2 died 10 days ago (the time of death is kept when a message dies: the dead-letter set's too).
	if _, err := db.Pool.Exec(context.Background(), db.SQL(`WITH d AS (UPDATE {schema}.inbox_dead SET died_at = now() - interval '10 days' WHERE id = $1)
		UPDATE {schema}.inbox SET completed_at = now() - interval '10 days' WHERE id = $1`), ids["d2"]); err != nil {
		t.Fatal(err)
	}
	list := func(args ...string) []int64 {
		t.Helper()
		ms := decode[[]deadLetterJSON](t, cli(t, db.URL, append([]string{"dead", "list", "--schema", db.Schema, "--json"}, args...)...))
		var got []int64
		for _, m := range ms {
			got = append(got, m.ID)
		}
		return got
	}
	want := func(name string, got []int64, ids ...int64) {
		t.Helper()
		if fmt.Sprint(got) != fmt.Sprint(ids) {
			t.Errorf("%s: %v, want %v", name, got, ids)
		}
	}
	all := []int64{ids["d3"], ids["d2"], ids["d1"]} // newest first
	want("--until 7d", list("--until", "7d"), ids["d2"])
	want("--until 240h1m", list("--until", "240h1m")) // d2 died 240h ago, not before 240h1m ago
	want("--until 1h", list("--until", "1h"), ids["d2"])
	want("--until RFC 3339", list("--until", time.Now().Add(time.Hour).UTC().Format(time.RFC3339)), all...)
	want("--until date", list("--until", time.Now().AddDate(0, 0, 2).UTC().Format(time.DateOnly)), all...)
	want("--until date, long ago", list("--until", "2001-01-01"))
	want("--since 7d --until 1m", list("--since", "7d", "--until", "1ms"), ids["d3"], ids["d1"])
	want("--until 7d --consumer audit", list("--until", "7d", "--consumer", "audit"))
	cli(t, db.URL, "dead", "list", "--schema", db.Schema, "--until", "next week").want(t, 2, "", "--until")
	cli(t, db.URL, "dead", "list", "--schema", db.Schema, "--since", "1h", "--until", "7d").want(t, 1, "", "Until")
}

// TestDiscardOlder (was TestPurge): discard-older, and purge, its alias.
func TestDiscardOlder(t *testing.T) {
	t.Parallel()
	db, ids := seed(t)
	cli(t, db.URL, "--schema", db.Schema, "discard-older").want(t, 2, "", "discard-older needs --older-than")
	cli(t, db.URL, "--schema", db.Schema, "purge").want(t, 2, "", "discard-older needs --older-than")
	cli(t, db.URL, "--schema", db.Schema, "discard-older", "--older-than", "soon").want(t, 2, "", "is not a duration")
	cli(t, db.URL, "--schema", db.Schema, "discard-older", "--older-than", "1d", "--state", "pending").want(t, 2, "", "cannot be discarded")
	out := decode[map[string]int64](t, cli(t, db.URL, "--schema", db.Schema, "--json", "discard-older", "--older-than", "30d"))
	if out["discarded"] != 1 {
		t.Fatalf("discard-older: %v", out)
	}
	if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE id = $1`, ids["c1"]); got != 0 {
		t.Fatal("old completed message not discarded")
	}
	cli(t, db.URL, "--schema", db.Schema, "purge", "--older-than", "0s", "--state", "completed,dead").want(t, 0, "discarded 3 message(s)", "")
	if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox`); got != 1 {
		t.Fatalf("rows left = %d, want the pending one", got)
	}
}

func TestClean(t *testing.T) {
	t.Parallel()
	db, ids := seed(t)
	// c1 is completed within its window: nothing to clean.
	out := decode[map[string]int64](t, cli(t, db.URL, "--schema", db.Schema, "clean", "--json"))
	if out["deleted"] != 0 {
		t.Fatalf("clean: %v", out)
	}
	if _, err := db.Pool.Exec(context.Background(), db.SQL(`UPDATE {schema}.inbox SET expires_at = now() - interval '1 second' WHERE id = $1`), ids["c1"]); err != nil {
		t.Fatal(err)
	}
	cli(t, db.URL, "--schema", db.Schema, "clean", "--batch-size", "1").want(t, 0, "deleted 1 expired message(s)", "")
	if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox`); got != 4 {
		t.Fatalf("rows left = %d, want 4 (pending and dead are never cleaned)", got)
	}
	cli(t, db.URL, "--schema", db.Schema, "clean", "--batch-size", "0").want(t, 2, "", "--batch-size must be between")
}

// rotate begins new generations: the second retires the generation of the seeded messages, keeping
// all but the expired completed one.
func TestRotate(t *testing.T) {
	t.Parallel()
	db, ids := seed(t)
	if _, err := db.Pool.Exec(context.Background(), db.SQL(`UPDATE {schema}.inbox SET expires_at = now() - interval '1 second' WHERE id = $1`), ids["c1"]); err != nil {
		t.Fatal(err)
	}
	cli(t, db.URL, "--schema", db.Schema, "rotate").want(t, 0, "generation 1 begun: 0 message(s) kept", "")
	out := decode[map[string]any](t, cli(t, db.URL, "--schema", db.Schema, "rotate", "--json"))
	if out["rotated"] != true || out["generation"] != float64(2) || out["copied"] != float64(4) {
		t.Fatalf("rotate --json: %v", out)
	}
	if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox`); got != 4 {
		t.Fatalf("rows left = %d, want 4 (the expired completed one leaves)", got)
	}
	cli(t, db.URL, "--schema", db.Schema, "rotate", "--lock-timeout", "0s").want(t, 2, "", "--lock-timeout must be at least 1ms")
}

// snapshot is whether the public schema exists, the number of schemas whose names are not plain
// identifiers (none: the bad names tried must never be created; counting all schemas would see other
// tests' come and go), and a checksum of every row of db's inbox tables.
func snapshot(t *testing.T, db *testdb.DB) string {
	t.Helper()
	var s string
	err := db.Pool.QueryRow(context.Background(), db.SQL(`SELECT
		(SELECT count(*) FROM pg_namespace WHERE nspname = 'public') || ':' ||
		(SELECT count(*) FROM pg_namespace WHERE nspname !~ '^[A-Za-z_][A-Za-z0-9_]*$') || '/' ||
		(SELECT count(*) || ':' || coalesce(md5(string_agg(m::text, '|' ORDER BY m.id)), '') FROM {schema}.inbox m) || '/' ||
		(SELECT count(*) || ':' || coalesce(md5(string_agg(q::text, '|' ORDER BY q.id)), '') FROM {schema}.inbox_queue q)`)).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	db, ids := seed(t)
	url := db.URL
	before := snapshot(t, db)
	sqlText := `x; DROP TABLE inbox; --`
	cases := []struct {
		args   []string
		url    string
		stderr string
	}{
		{[]string{"stats"}, "", "no database: pass --database-url or set DATABASE_URL"},
		{[]string{"stats", "--bogus"}, url, "flag provided but not defined: -bogus"},
		{[]string{"--bogus", "stats"}, url, "flag provided but not defined: -bogus"},
		{[]string{"stats", "--schema", "bad-name"}, url, `"bad-name" is not a plain identifier`},
		{[]string{"--schema", "1abc", "dead", "list"}, url, "not a plain identifier"},
		{[]string{"frobnicate"}, url, `unknown command "frobnicate"`},
		{[]string{}, url, "no command given"},
		{[]string{"stats", "extra"}, url, "unexpected arguments: extra"},
		{[]string{"dead", "list", "--limit", "5000"}, url, "--limit must be between 1 and 1000"},
		{[]string{"stats", "--database-url", "postgres://%zz"}, "", "invalid database URL"},
	}
	// Schemas that are not plain identifiers, on every command that could write (migrate up creates
	// the schema; discard, replay, purge and clean delete or update rows).
	for _, schema := range []string{`a"b`, `a.b`, sqlText, `public"; DROP SCHEMA public CASCADE; --`, "a\xffb", db.Schema + ".inbox"} {
		for _, args := range [][]string{
			{"migrate", "up"}, {"migrate", "down"}, {"stats"}, {"dead", "list"}, {"dead", "discard", fmt.Sprint(ids["d1"])},
			{"dead", "replay", "--all"}, {"purge", "--older-than", "0s", "--state", "completed,dead"}, {"clean"}, {"rotate"},
			{"migrate", "status"}, {"dead", "discard", "--all", "--yes"}, {"dead", "discard", "--all", "--dry-run"},
			{"pending", "discard", "--consumer", "ledger"}, {"pending", "discard", "--dry-run", fmt.Sprint(ids["p1"])},
		} {
			cases = append(cases, struct {
				args   []string
				url    string
				stderr string
			}{append([]string{"--schema", schema}, args...), url, "is not a plain identifier"})
		}
	}
	// Consumer and kind filters no message can have: refused before connecting, not an empty match.
	for _, name := range []string{`a"b`, sqlText, "a b", "a\xffb", "", "-leading", strings.Repeat("c", 129), "clé", "a'b"} {
		if name == "" {
			continue // an empty flag means no filter
		}
		for _, flag := range []string{"--consumer", "--kind"} {
			for _, args := range [][]string{
				{"dead", "list", flag, name}, {"dead", "discard", "--all", flag, name}, {"dead", "replay", "--all", flag, name},
				{"dead", "discard", "--all", "--dry-run", flag, name}, {"pending", "discard", fmt.Sprint(ids["p1"]), flag, name},
				{"pending", "discard", "--dry-run", fmt.Sprint(ids["p1"]), flag, name},
			} {
				cases = append(cases, struct {
					args   []string
					url    string
					stderr string
				}{append([]string{"--schema", db.Schema}, args...), url, flag + ":"})
			}
		}
	}
	cases = append(cases, struct {
		args   []string
		url    string
		stderr string
	}{[]string{"--schema", db.Schema, "dead", "discard", "--all", "--error", "a\xffb"}, url, "--error:"})
	for _, c := range cases {
		r := cli(t, c.url, c.args...)
		if r.code != 2 || !strings.Contains(r.stderr, c.stderr) || !strings.Contains(r.stderr, "--help") {
			t.Errorf("txinbox %q: exit %d, stderr:\n%s\nwant exit 2 and %q", c.args, r.code, r.stderr, c.stderr)
		}
		if after := snapshot(t, db); after != before {
			t.Fatalf("txinbox %q wrote something: %s -> %s", c.args, before, after)
		}
	}
	// A schema that is valid but not migrated says what to do.
	cli(t, url, "--schema", "txinbox_nothing_here", "stats").want(t, 1, "", "txinbox migrate up --schema txinbox_nothing_here")
	// An unreachable server.
	cli(t, "postgres://postgres@127.0.0.1:1/x?connect_timeout=5", "stats").want(t, 1, "", "cannot connect to the database")
}

func TestHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--help"}, {"help"}, {"-h"}, {"migrate", "--help"}, {"dead", "--help"}, {"help", "dead", "list"},
		{"migrate", "up", "--help"}, {"migrate", "down", "--help"}, {"migrate", "status", "--help"}, {"stats", "--help"},
		{"dead", "list", "--help"}, {"dead", "show", "--help"}, {"dead", "replay", "--help"}, {"dead", "discard", "--help"},
		{"purge", "--help"}, {"discard-older", "--help"}, {"clean", "--help"}, {"pending", "--help"}, {"pending", "discard", "--help"}, {"help", "pending", "discard"},
	} {
		r := cli(t, "", args...)
		if r.code != 0 || !strings.HasPrefix(r.stdout, "Usage: txinbox") || r.stderr != "" {
			t.Errorf("txinbox %v: exit %d\nstdout:\n%s\nstderr:\n%s", args, r.code, r.stdout, r.stderr)
		}
	}
	r := cli(t, "", "discard-older", "--help")
	for _, want := range []string{"-older-than", "-state", "-database-url", "-schema", "-json"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("discard-older --help lacks %s:\n%s", want, r.stdout)
		}
	}
}

// schemaState is whether schema exists and the names of its tables.
func schemaState(t *testing.T, url, schema string) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var s string
	err = conn.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM pg_namespace WHERE nspname = $1) || ':' ||
		coalesce((SELECT string_agg(table_name, ',' ORDER BY table_name) FROM information_schema.tables WHERE table_schema = $1), '')`,
		schema).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// migrate status is read-only: on a schema that does not exist or was never migrated it says so and
// creates nothing; migrate down there says "nothing to roll back", exits 0 and creates nothing.
func TestMigrateReadOnly(t *testing.T) {
	t.Parallel()
	existing, url := testdb.NewSchema(t)
	missing := existing + "_none"
	t.Cleanup(func() { // only if a bug created it
		ctx := context.Background()
		if conn, err := pgx.Connect(ctx, url); err == nil {
			_, _ = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{missing}.Sanitize()+" CASCADE")
			conn.Close(ctx)
		}
	})
	cli(t, url, "migrate", "status", "--schema", missing).want(t, 0, "schema "+missing+" does not exist", "")
	cli(t, url, "migrate", "status", "--schema", existing).want(t, 0, "schema "+existing+" was never migrated", "")
	st := decode[[]map[string]any](t, cli(t, url, "migrate", "status", "--schema", missing, "--json"))
	if len(st) == 0 || st[0]["applied"] != false || st[0]["name"] != "00001_inbox.sql" {
		t.Fatalf("status --json: %v", st)
	}
	for _, s := range []string{missing, existing} {
		cli(t, url, "migrate", "down", "--schema", s).want(t, 0, "nothing to roll back", "")
		if got := decode[[]map[string]any](t, cli(t, url, "migrate", "down", "--schema", s, "--json")); len(got) != 0 {
			t.Fatalf("down --json on %s: %v", s, got)
		}
	}
	if got := schemaState(t, url, missing); got != "0:" {
		t.Fatalf("schema %s after status and down: %s, want none", missing, got)
	}
	if got := schemaState(t, url, existing); got != "1:" {
		t.Fatalf("schema %s after status and down: %s, want no tables", existing, got)
	}
	// Migrated, then rolled back entirely: down again has nothing to roll back.
	cli(t, url, "migrate", "up", "--schema", existing).want(t, 0, "applied 00001_inbox.sql", "")
	cli(t, url, "migrate", "status", "--schema", existing).want(t, 0, "applied", "")
	files, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil || len(files) < 2 {
		t.Fatalf("migration files: %v %v", files, err)
	}
	for range files {
		cli(t, url, "migrate", "down", "--schema", existing).want(t, 0, "rolled back", "")
	}
	cli(t, url, "migrate", "down", "--schema", existing).want(t, 0, "nothing to roll back", "")
}

// dead discard --all needs --consumer or --yes; --dry-run previews and changes nothing.
func TestDeadDiscardGuards(t *testing.T) {
	t.Parallel()
	db, ids := seed(t)
	s, url := db.Schema, db.URL
	before := snapshot(t, db)
	for _, args := range [][]string{
		{"dead", "discard", "--all"},
		{"dead", "discard", "--all", "--kind", "OrderPaid"},
		{"dead", "discard", "--all", "--error", "funds"},
		{"dead", "discard", "--yes", fmt.Sprint(ids["d1"])},
		{"dead", "discard", "--dry-run"},
		{"dead", "discard", "--dry-run", "--all", "--consumer", "a b"},
		{"dead", "discard", "--dry-run", "0"},
	} {
		r := cli(t, url, append([]string{"--schema", s}, args...)...)
		if r.code != 2 || r.stdout != "" || !strings.Contains(r.stderr, "--help") {
			t.Errorf("txinbox %q: exit %d\nstdout:\n%s\nstderr:\n%s\nwant a usage error", args, r.code, r.stdout, r.stderr)
		}
	}
	cli(t, url, "--schema", s, "dead", "discard", "--all").want(t, 2, "", "--yes")
	// Dry runs: every dead letter, by id, and ids that would be skipped (exit 1, as the real discard).
	dry := fmt.Sprintf("dry run: would discard 3 dead letter(s): %d, %d, %d", ids["d1"], ids["d2"], ids["d3"])
	cli(t, url, "--schema", s, "dead", "discard", "--all", "--dry-run").want(t, 0, dry, "")
	cli(t, url, "--schema", s, "dead", "discard", "--dry-run", fmt.Sprint(ids["d2"])).want(t, 0, "would discard 1 dead letter(s)", "")
	cli(t, url, "--schema", s, "dead", "discard", "--dry-run", fmt.Sprint(ids["d2"]), fmt.Sprint(ids["p1"])).
		want(t, 1, "would skip 1 (not dead, or not found): "+fmt.Sprint(ids["p1"]), "would not be discarded")
	out := decode[map[string]any](t, cli(t, url, "--schema", s, "--json", "dead", "discard", "--all", "--dry-run", "--consumer", "ledger"))
	if fmt.Sprint(out["discarded"]) != fmt.Sprintf("[%d %d]", ids["d1"], ids["d2"]) || out["dry_run"] != true {
		t.Fatalf("dry run --json: %v", out)
	}
	if after := snapshot(t, db); after != before {
		t.Fatalf("rows changed: %s -> %s", before, after)
	}
	// --yes confirms --all across consumers.
	cli(t, url, "--schema", s, "dead", "discard", "--all", "--yes").want(t, 0, "discarded 3 dead letter(s)", "")
	if n := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE state = 'dead'`); n != 0 {
		t.Fatalf("%d dead letters left", n)
	}
}

// Each command says why it skipped an id, in its own terms.
func TestSkipMessages(t *testing.T) {
	t.Parallel()
	db, ids := seed(t)
	s, url := db.Schema, db.URL
	p1 := fmt.Sprint(ids["p1"])
	cli(t, url, "--schema", s, "dead", "discard", p1).want(t, 1, "skipped 1 (not dead, or not found): "+p1, "not discarded")
	cli(t, url, "--schema", s, "dead", "replay", p1).want(t, 1, "skipped 1 (not dead, not found, or stored undecodable): "+p1, "not replayed")
	cli(t, url, "--schema", s, "pending", "discard", fmt.Sprint(ids["c1"])).
		want(t, 1, "skipped 1 (not found, or not pending: completed or dead): "+fmt.Sprint(ids["c1"]), "not discarded")
	cli(t, url, "--schema", s, "pending", "discard", "--consumer", "audit", p1).
		want(t, 1, "skipped 1 (not found, not pending, or not of the --consumer/--kind given): "+p1, "not discarded")
}

// The JSON of stats and dead show uses the names and encodings of the Go types, and the text form
// of dead show prints the fingerprint as the JSON does.
func TestJSONMatchesGoTypes(t *testing.T) {
	t.Parallel()
	db, ids := seed(t)
	if _, err := db.Pool.Exec(context.Background(), db.SQL(`UPDATE {schema}.inbox SET next_run_at = now() - interval '1 hour' WHERE id = $1`), ids["p1"]); err != nil {
		t.Fatal(err)
	}
	c, err := admin.New(db.Store(), admin.Config{})
	if err != nil {
		t.Fatal(err)
	}
	goStats, err := c.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(goStats)
	if err != nil {
		t.Fatal(err)
	}
	var want []map[string]any
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	got := decode[[]map[string]any](t, cli(t, db.URL, "stats", "--schema", db.Schema, "--json"))
	if len(got) != len(want) {
		t.Fatalf("stats --json %v, Go %v", got, want)
	}
	for i := range got {
		for k := range want[i] {
			if _, ok := got[i][k]; !ok {
				t.Errorf("stats --json lacks %q of the Go type: %v", k, got[i])
			}
		}
		for k := range got[i] {
			if _, ok := want[i][k]; !ok {
				t.Errorf("stats --json has %q, unknown to the Go type: %v", k, want[i])
			}
		}
	}
	// The oldest due pending message of ledger has waited an hour: seconds, not nanoseconds.
	if age, _ := got[1]["oldest_pending_seconds"].(float64); got[1]["consumer"] != "ledger" || age < 3500 || age > 86400 {
		t.Fatalf("ledger: oldest_pending_seconds = %v, want about 3600", got[1]["oldest_pending_seconds"])
	}
	var back []admin.ConsumerStats
	if err := json.Unmarshal(b, &back); err != nil || back[1].OldestPendingAge != goStats[1].OldestPendingAge {
		t.Fatalf("round trip: %+v, %v; want %+v", back, err, goStats)
	}

	id := fmt.Sprint(ids["d2"])
	m, err := c.GetMessage(context.Background(), ids["d2"])
	if err != nil {
		t.Fatal(err)
	}
	show := decode[map[string]any](t, cli(t, db.URL, "--schema", db.Schema, "--json", "dead", "show", id))
	hexFP := fmt.Sprintf("%x", []byte(m.Fingerprint))
	if show["fingerprint"] != hexFP {
		t.Fatalf("dead show --json fingerprint %v, want hex %s", show["fingerprint"], hexFP)
	}
	if b, _ := json.Marshal(m); !strings.Contains(string(b), `"fingerprint":"`+hexFP+`"`) {
		t.Fatalf("Go JSON of the message: %s, want fingerprint %s", b, hexFP)
	}
	r := cli(t, db.URL, "--schema", db.Schema, "dead", "show", id)
	r.want(t, 0, hexFP, "")
	for line := range strings.Lines(r.stdout) {
		if strings.HasPrefix(line, "fingerprint:") && strings.TrimSpace(strings.TrimPrefix(line, "fingerprint:")) != hexFP {
			t.Fatalf("dead show: %q, want fingerprint %s", line, hexFP)
		}
	}
}

func TestPendingDiscard(t *testing.T) {
	t.Parallel()
	db, ids := seed(t)
	s, url := db.Schema, db.URL
	c, err := inbox.New(txinbox.Store{DB: db.Pool, Schema: s}, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	more := map[string]int64{}
	for _, m := range []inbox.Message{
		{Consumer: "ledgr", Key: "t1", Kind: "OrderPaid", Payload: []byte(`{}`)}, // a mistyped consumer
		{Consumer: "ledgr", Key: "t2", Kind: "Refund", Payload: []byte(`{}`)},
		{Consumer: "ledgr", Key: "t3", Kind: "OrderPaid", Payload: []byte(`{}`)},
	} {
		r, err := c.Receive(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		more[m.Key] = r.ID
	}
	// t3 is claimed by a worker: its batch in flight lists it (migration 00011).
	if _, err := db.Pool.Exec(ctx, db.SQL(`INSERT INTO {schema}.inbox_batch (consumer, xid, ids, owner)
		VALUES ('ledgr', '1', ARRAY[$1::bigint], 'w1')`), more["t3"]); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, db)
	t1, t2, t3 := fmt.Sprint(more["t1"]), fmt.Sprint(more["t2"]), fmt.Sprint(more["t3"])
	cli(t, url, "--schema", s, "pending", "discard", "--consumer", "ledgr", "--dry-run").
		want(t, 0, "dry run: would discard 2 pending message(s): "+t1+", "+t2+"\nwould leave 1 claimed by a worker (not discarded): "+t3+"\nnothing was changed", "")
	if after := snapshot(t, db); after != before {
		t.Fatalf("dry run changed rows: %s -> %s", before, after)
	}
	// By consumer and kind.
	cli(t, url, "--schema", s, "pending", "discard", "--consumer", "ledgr", "--kind", "Refund").want(t, 0, "discarded 1 pending message(s): "+t2, "")
	// By id: the claimed one is not discarded (exit 1).
	out := decode[map[string][]int64](t, cli(t, url, "--schema", s, "--json", "pending", "discard", t1, t3))
	if fmt.Sprint(out["discarded"], out["claimed"], out["skipped"]) != fmt.Sprintf("[%s] [%s] []", t1, t3) {
		t.Fatalf("discard by id: %v", out)
	}
	cli(t, url, "--schema", s, "pending", "discard", "--consumer", "ledgr").want(t, 0, "discarded 0 pending message(s)\nleft 1 claimed by a worker (not discarded): "+t3, "")
	if n := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE consumer = 'ledgr'`); n != 1 {
		t.Fatalf("%d messages of ledgr left, want the claimed one", n)
	}
	if n := db.Count(t, `SELECT count(*) FROM {schema}.inbox_queue WHERE consumer = 'ledgr'`); n != 1 {
		t.Fatalf("%d queue rows of ledgr left, want the claimed one", n)
	}
	// ledger's pending message and the other states are untouched.
	if n := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE consumer <> 'ledgr'`); n != 5 {
		t.Fatalf("%d other messages, want 5", n)
	}
	_ = ids
}

// Bad input to pending discard exits 2 and writes nothing.
func TestPendingDiscardUsage(t *testing.T) {
	t.Parallel()
	db, ids := seed(t)
	before := snapshot(t, db)
	p1 := fmt.Sprint(ids["p1"])
	for _, c := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"pending", "discard"}, "needs message ids or --consumer"},
		{[]string{"pending", "discard", "--kind", "OrderPaid"}, "needs message ids or --consumer"},
		{[]string{"pending", "discard", "--dry-run"}, "needs message ids or --consumer"},
		{[]string{"pending", "discard", "--consumer", "a b"}, "--consumer:"},
		{[]string{"pending", "discard", "--consumer", `x"; DELETE FROM inbox; --`}, "--consumer:"},
		{[]string{"pending", "discard", "--consumer", "ledger", "--kind", "a\xffb"}, "--kind:"},
		{[]string{"pending", "discard", "0"}, "not a message id"},
		{[]string{"pending", "discard", p1, "x"}, "not a message id"},
		{[]string{"pending", "discard", "--consumer", "ledger", "--bogus"}, "flag provided but not defined"},
		{[]string{"pending", "discard", "--consumer", "ledger", "--dry-run=maybe"}, "invalid boolean"},
		{[]string{"--schema", "a.b", "pending", "discard", "--consumer", "ledger"}, "not a plain identifier"},
		{[]string{"pending"}, "needs a sub-command: discard"},
		{[]string{"pending", "list"}, `unknown sub-command "pending list"`},
	} {
		args := c.args
		if args[0] != "--schema" {
			args = append([]string{"--schema", db.Schema}, args...)
		}
		cli(t, db.URL, args...).want(t, 2, "", c.stderr)
		if after := snapshot(t, db); after != before {
			t.Fatalf("txinbox %q wrote something: %s -> %s", args, before, after)
		}
	}
}
