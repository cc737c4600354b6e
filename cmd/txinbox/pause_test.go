package main

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/txinbox/txinbox/admin"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// pause consumer|topic, resume consumer|topic and paused, round trip: each with --json, exit 0 when it
// acted, 1 when there was nothing to do (paused already, not paused), 2 for a bad name; what they do
// is what admin sees.
func TestPauseCommands(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	s := []string{"--schema", db.Schema}
	run := func(args ...string) result { return cli(t, db.URL, append(args, s...)...) }

	run("paused").want(t, 0, "nothing paused in schema "+db.Schema, "")
	run("pause", "consumer", "ledger", "--by", "alice", "--reason", "ledger API down").want(t, 0, "consumer ledger paused", "")
	got := decode[pauseJSON](t, run("pause", "topic", "orders.created", "--json", "--by", "bob"))
	if got != (pauseJSON{View: "outbox", Name: "orders.created", Changed: true}) {
		t.Fatalf("pause topic --json: %+v", got)
	}
	r := run("pause", "consumer", "ledger", "--by", "carol")
	r.want(t, 1, "", "consumer ledger was paused already")
	if r = run("pause", "consumer", "ledger", "--json"); r.code != 1 || decode[pauseJSON](t, r).Changed {
		t.Fatalf("pause again --json: exit %d, %s", r.code, r.stdout)
	}

	list := decode[[]map[string]any](t, run("paused", "--json"))
	if len(list) != 2 || list[0]["view"] != "inbox" || list[0]["name"] != "ledger" || list[0]["paused_by"] != "alice" ||
		list[0]["reason"] != "ledger API down" || list[0]["paused_at"] == "" ||
		list[1]["view"] != "outbox" || list[1]["name"] != "orders.created" || list[1]["paused_by"] != "bob" {
		t.Fatalf("paused --json: %v", list)
	}
	r = run("paused")
	r.want(t, 0, "ledger API down", "")
	if !strings.Contains(r.stdout, "consumer  ledger") || !strings.Contains(r.stdout, "topic     orders.created") {
		t.Fatalf("paused:\n%s", r.stdout)
	}
	a, err := admin.New(db.Store(), admin.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ps, err := a.ListPaused(context.Background())
	if err != nil || len(ps) != 2 || ps[0].By != "alice" || ps[1].View != admin.Outbox {
		t.Fatalf("admin.ListPaused = %+v, %v", ps, err)
	}

	run("resume", "consumer", "ledger").want(t, 0, "consumer ledger resumed", "")
	run("resume", "consumer", "ledger").want(t, 1, "", "consumer ledger was not paused")
	if got := decode[pauseJSON](t, run("resume", "topic", "orders.created", "--json")); !got.Changed {
		t.Fatalf("resume topic --json: %+v", got)
	}
	run("paused", "--json").want(t, 0, "[]", "")

	// Usage errors: exit 2, nothing written.
	for _, args := range [][]string{
		{"pause", "consumer"}, {"pause", "consumer", "a", "b"}, {"pause", "consumer", "bad name"},
		{"pause", "topic", "t", "--reason", "bell\a"}, {"resume", "topic"}, {"pause", "queue", "x"}, {"paused", "x"},
	} {
		cli(t, db.URL, append(args, s...)...).want(t, 2, "", "txinbox: ")
	}
	run("paused", "--json").want(t, 0, "[]", "")
	// --by defaults to the operating system's user name.
	run("pause", "consumer", "c2").want(t, 0, "paused", "")
	if ps, err := a.ListPaused(context.Background()); err != nil || len(ps) != 1 || ps[0].By == "" {
		t.Fatalf("paused without --by: %+v, %v", ps, err)
	}
}

// Every command of the command table answers --help with its usage, exit 0, and is listed in the
// command's documentation (the package comment of main.go).
func TestEveryCommandHasHelpAndIsDocumented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range commands {
		r := cli(t, "", append(strings.Fields(c.name), "--help")...)
		if r.code != 0 || !strings.HasPrefix(r.stdout, "Usage: txinbox "+c.name+" ") {
			t.Errorf("txinbox %s --help: exit %d\n%s%s", c.name, r.code, r.stdout, r.stderr)
		}
		// Named in full, or by its first word at the start of a line ("pause consumer|topic NAME").
		if !strings.Contains(string(doc), c.name) && !strings.Contains(string(doc), "//\t"+strings.Fields(c.name)[0]+" ") {
			t.Errorf("txinbox %s is not in main.go's list of commands", c.name)
		}
	}
}
