package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox/examples/ledger/internal/demo"
	"github.com/txinbox/txinbox/examples/ledger/internal/pgenv"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// TestDemoShort runs a short demo: duplicated deliveries over HTTP, transient failures, a poison
// event, a child worker process SIGKILLed while it holds a batch, the replay of the whole stream.
// Every invariant must hold (every balance exact).
func TestDemoShort(t *testing.T) {
	t.Parallel()
	schema, url := testdb.NewSchema(t)
	o := demo.DefaultOptions()
	o.URL, o.Database, o.Schema, o.Reset = url, "test server", schema, false
	o.Events, o.Credits, o.Producers, o.Workers = 300, 30, 8, 2
	o.Timeout = time.Minute
	o.ChildCommand = testChildCommand
	rep, err := demo.Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	rep.Print(&out)
	if !rep.OK() {
		t.Fatalf("invariants failed:\n%s", out.String())
	}
	if !rep.Crash.Killed || rep.Unfinished == 0 || rep.Dead != 1 || rep.Duplicates == 0 || rep.ReplayDeliveries == 0 {
		t.Fatalf("the demo did not exercise everything:\n%s", out.String())
	}
	t.Logf("\n%s", out.String())
}

// TestDemoOnThrowawayCluster runs `ledger demo` as `make demo` does, forcing the throwaway cluster
// (initdb/pg_ctl from the local PostgreSQL binaries), and checks that the cluster is removed. Without
// PostgreSQL binaries it is skipped, unless CI=true, where it fails.
func TestDemoOnThrowawayCluster(t *testing.T) {
	t.Parallel()
	requireBinaries(t, pgenv.Binaries)
	var stdout, stderr syncBuffer // the demo's progress and log lines come from several goroutines
	code := run(context.Background(), []string{"demo", "--pg", "cluster", "--database-url", "",
		"--events", "60", "--credits", "10", "--producers", "4", "--workers", "2"}, &stdout, &stderr, testChildCommand)
	if code != 0 || !strings.Contains(stdout.String(), "ALL INVARIANTS HOLD") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	var dir string
	for _, line := range strings.Split(stderr.String(), "\n") {
		if i := strings.Index(line, "data in "); i >= 0 {
			dir = strings.Fields(line[i+len("data in "):])[0]
			dir = strings.TrimSuffix(dir, ",")
		}
	}
	if dir == "" || !strings.Contains(stdout.String(), "throwaway cluster") {
		t.Fatalf("not run on a throwaway cluster:\n%s\n%s", stdout.String(), stderr.String())
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("cluster directory %s still there (%v)", dir, err)
	}
}

// requireBinaries skips t when find finds no PostgreSQL binaries, or fails it if CI=true.
func requireBinaries(t testing.TB, find func() (string, error)) {
	t.Helper()
	if _, err := find(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and no PostgreSQL binaries for the throwaway cluster: %v", err)
			return // (Fatalf does not return, except in TestMissingBinariesFailInCI)
		}
		t.Skip(err)
	}
}

// outcomeTB records how requireBinaries ended a test.
type outcomeTB struct {
	testing.TB
	failed, skipped bool
}

func (o *outcomeTB) Helper()               {}
func (o *outcomeTB) Fatalf(string, ...any) { o.failed = true }
func (o *outcomeTB) Skip(...any)           { o.skipped = true }

func TestMissingBinariesFailInCI(t *testing.T) { // not parallel: t.Setenv
	missing := func() (string, error) { return "", errors.New("initdb and pg_ctl not found") }
	for _, ci := range []string{"true", ""} {
		t.Setenv("CI", ci)
		o := &outcomeTB{TB: t}
		requireBinaries(o, missing)
		if o.failed != (ci == "true") || o.skipped != (ci != "true") {
			t.Errorf("CI=%q: failed %v, skipped %v; want a failure in CI and a skip elsewhere", ci, o.failed, o.skipped)
		}
	}
}

// `ledger demo` on a server that outlives it ends by naming the schema it leaves and the command that
// drops it, which works; with --drop it drops the schema itself.
func TestDemoLeavesItsSchemaOrDropsIt(t *testing.T) {
	t.Parallel()
	url := testdb.URL(t)
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	schema := "ledger_demo_" + hex.EncodeToString(b) // the demo creates it (--reset), and the notifier's
	notifierSchema := schema + "_notifier"
	t.Cleanup(func() { dropSchema(t, url, schema); dropSchema(t, url, notifierSchema) })
	args := []string{"demo", "--database-url", url, "--schema", schema,
		"--events", "60", "--credits", "10", "--producers", "4", "--workers", "2"}

	var stdout, stderr syncBuffer // the demo's progress and log lines come from several goroutines
	if code := run(context.Background(), args, &stdout, &stderr, testChildCommand); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	_, left, ok := strings.Cut(stdout.String(), "Left: schemas "+schema+" and "+notifierSchema+" on ")
	_, cmd, ok2 := strings.Cut(left, "To drop them:\n  ")
	cmd, _, ok3 := strings.Cut(cmd, "\n")
	if !ok || !ok2 || !ok3 || !strings.HasPrefix(cmd, "psql ") {
		t.Fatalf("the demo does not end with the schemas it leaves and a psql command:\n%s", stdout.String())
	}
	for _, s := range []string{schema, notifierSchema} {
		if !schemaExists(t, url, s) {
			t.Fatalf("schema %s is gone, though the demo says it is left", s)
		}
	}
	if _, err := exec.LookPath("psql"); err != nil {
		t.Fatalf("psql (PostgreSQL's client) is needed to run the printed command: %v", err)
	}
	if out, err := exec.Command("bash", "-c", cmd).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, out)
	}
	for _, s := range []string{schema, notifierSchema} {
		if schemaExists(t, url, s) {
			t.Fatalf("schema %s is still there after %s", s, cmd)
		}
	}

	stdout, stderr = syncBuffer{}, syncBuffer{}
	if code := run(context.Background(), append(args, "--drop"), &stdout, &stderr, testChildCommand); code != 0 {
		t.Fatalf("--drop: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), "Dropped schemas "+schema+" and "+notifierSchema+" (--drop).") ||
		schemaExists(t, url, schema) || schemaExists(t, url, notifierSchema) {
		t.Fatalf("--drop: schemas exist %v, %v; stdout:\n%s", schemaExists(t, url, schema), schemaExists(t, url, notifierSchema), stdout.String())
	}
}

// --drop, like --reset, refuses a schema that is not the demo's.
func TestDemoDropRefusesOtherSchemas(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"demo", "--reset=false", "--drop", "--schema", "public"}, &stdout, &stderr, testChildCommand)
	if code != 2 || !strings.Contains(stderr.String(), "--drop only drops schemas named ledger_demo*") {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr.String())
	}
}

func schemaExists(t *testing.T, url, schema string) bool {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var ok bool
	if err := c.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", schema).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

func dropSchema(t *testing.T, url, schema string) {
	ctx := context.Background()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Error(err)
		return
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		t.Error(err)
	}
}
