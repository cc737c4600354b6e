package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/internal/testdb"
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

func (r result) want(t *testing.T, code int, stdoutHas, stderrHas string) {
	t.Helper()
	if r.code != code || !strings.Contains(r.stdout, stdoutHas) || !strings.Contains(r.stderr, stderrHas) {
		t.Fatalf("exit %d (want %d)\nstdout (want %q):\n%s\nstderr (want %q):\n%s", r.code, code, stdoutHas, r.stdout, stderrHas, r.stderr)
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
	db := testdb.New(t)
	c, err := inbox.NewClient(db.Pool, inbox.Config{Schema: db.Schema})
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
	exec(`UPDATE {schema}.inbox SET state = 'dead', completed_at = now(), attempts_started = 10, attempts_failed = 10,
		last_error = CASE key WHEN 'd2' THEN 'timeout' ELSE 'insufficient funds' END WHERE key LIKE 'd%'`)
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
	list := decode[[]inbox.StoredMessage](t, cli(t, url, "dead", "list", "--schema", s, "--json", "--consumer", "ledger", "--error", "funds"))
	if len(list) != 1 || list[0].ID != ids["d1"] || list[0].State != inbox.StateDead {
		t.Fatalf("filtered list: %+v", list)
	}
	list = decode[[]inbox.StoredMessage](t, cli(t, url, "dead", "list", "--schema", s, "--json", "--limit", "1"))
	if len(list) != 1 {
		t.Fatalf("limited list: %+v", list)
	}
	cli(t, url, "dead", "list", "--schema", s, "--limit", "1").want(t, 0, "", "--after")
	list = decode[[]inbox.StoredMessage](t, cli(t, url, "dead", "list", "--schema", s, "--json", "--since", "1h", "--kind", "Nope"))
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
	left := decode[[]inbox.StoredMessage](t, cli(t, url, "dead", "list", "--schema", s, "--json"))
	if len(left) != 1 || left[0].ID != ids["d2"] {
		t.Fatalf("dead letters left: %+v", left)
	}
	// replay --all puts the rest back.
	cli(t, url, "--schema", s, "dead", "replay", "--all").want(t, 0, "replayed 1 dead letter(s)", "")
}

func TestPurge(t *testing.T) {
	t.Parallel()
	db, ids := seed(t)
	cli(t, db.URL, "--schema", db.Schema, "purge").want(t, 2, "", "purge needs --older-than")
	cli(t, db.URL, "--schema", db.Schema, "purge", "--older-than", "soon").want(t, 2, "", "is not a duration")
	cli(t, db.URL, "--schema", db.Schema, "purge", "--older-than", "1d", "--state", "pending").want(t, 2, "", "cannot be purged")
	out := decode[map[string]int64](t, cli(t, db.URL, "--schema", db.Schema, "--json", "purge", "--older-than", "30d"))
	if out["purged"] != 1 {
		t.Fatalf("purge: %v", out)
	}
	if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE id = $1`, ids["c1"]); got != 0 {
		t.Fatal("old completed message not purged")
	}
	cli(t, db.URL, "--schema", db.Schema, "purge", "--older-than", "0s", "--state", "completed,dead").want(t, 0, "purged 3 message(s)", "")
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

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	url := db.URL
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
	for _, c := range cases {
		r := cli(t, c.url, c.args...)
		if r.code != 2 || !strings.Contains(r.stderr, c.stderr) || !strings.Contains(r.stderr, "--help") {
			t.Errorf("txinbox %v: exit %d, stderr:\n%s\nwant exit 2 and %q", c.args, r.code, r.stderr, c.stderr)
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
		{"purge", "--help"}, {"clean", "--help"},
	} {
		r := cli(t, "", args...)
		if r.code != 0 || !strings.HasPrefix(r.stdout, "Usage: txinbox") || r.stderr != "" {
			t.Errorf("txinbox %v: exit %d\nstdout:\n%s\nstderr:\n%s", args, r.code, r.stdout, r.stderr)
		}
	}
	r := cli(t, "", "purge", "--help")
	for _, want := range []string{"-older-than", "-state", "-database-url", "-schema", "-json"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("purge --help lacks %s:\n%s", want, r.stdout)
		}
	}
}
