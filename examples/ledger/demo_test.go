package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/txinbox/txinbox/examples/ledger/internal/demo"
	"github.com/txinbox/txinbox/examples/ledger/internal/pgenv"
	"github.com/txinbox/txinbox/internal/testdb"
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
	var stdout, stderr bytes.Buffer
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
