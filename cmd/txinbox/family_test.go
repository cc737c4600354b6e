package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/txinbox/txinbox/outbox"
	"github.com/txinbox/txinbox/txinboxtest/outboxtest"
)

// familyCase is how TestEveryCommandJSONAndUsage runs one command of the command table.
type familyCase struct {
	// json are the arguments (after the command's name) of a harmless run with --json: a read, a
	// dry run, a no-op, or an action on the test's own schema; code is its documented exit status
	// (1 where the command documents it for a given id or name it did not act on).
	json []string
	code int
	// noJSON says why the command has no run with --json (json is then nil).
	noJSON string
	// usage are arguments that are a usage error of the command.
	usage []string
}

// Every command of the command table (commands), enumerated from it, keeps the CLI's two promises to
// scripts (main.go's package comment): with --json it prints one JSON document (an object or an
// array, never a table, never null) on stdout, and a usage error exits with status 2, writes nothing
// on stdout and points to the command's --help. Each command has a case below; a command without one
// fails the test, so that a new command is never skipped without a reason written here.
func TestEveryCommandJSONAndUsage(t *testing.T) {
	t.Parallel()
	db, ids := seed(t)
	event := outboxtest.Publish(t, db, outbox.Message{Topic: "orders", Payload: []byte(`{}`)})[0]
	const noSuchID = "999999999"
	cases := map[string]familyCase{
		"migrate up": {usage: []string{"extra"}}, // up to date: applies nothing, prints []
		// A schema that does not exist: nothing to roll back, nothing written.
		"migrate down":   {json: []string{"--schema", "txinbox_family_absent"}, usage: []string{"extra"}},
		"migrate status": {usage: []string{"extra"}},
		"stats":          {json: []string{"--health"}, usage: []string{"extra"}},
		"dead list":      {usage: []string{"--limit", "0"}},
		"dead show":      {json: []string{fmt.Sprint(ids["d1"])}, usage: []string{}},
		"dead replay":    {json: []string{noSuchID}, code: 1, usage: []string{}},
		"dead discard":   {json: []string{"--all", "--dry-run"}, usage: []string{"--all"}},
		"pending discard": {json: []string{"--consumer", "ledger", "--dry-run"},
			usage: []string{"--kind", "OrderPaid"}},
		"clean":  {usage: []string{"--batch-size", "0"}},    // nothing past its window in the seed
		"rotate": {usage: []string{"--lock-timeout", "0s"}}, // begins a generation of the test's own schema
		// Nothing finished a century ago.
		"discard-older":        {json: []string{"--older-than", "36500d"}, usage: []string{}},
		"purge":                {json: []string{"--older-than", "36500d"}, usage: []string{"--older-than", "soon"}},
		"inflight list":        {usage: []string{"--state", "dead"}},
		"outbox stats":         {usage: []string{"extra"}},
		"outbox inflight list": {usage: []string{"--state", "sent"}},
		"outbox dead list":     {usage: []string{"--limit", "0"}},
		"outbox dead show":     {json: []string{fmt.Sprint(event)}, usage: []string{}},
		"outbox dead replay":   {json: []string{noSuchID}, code: 1, usage: []string{}},
		"outbox dead discard":  {json: []string{"--all", "--dry-run"}, usage: []string{"--all"}},
		"pause consumer":       {json: []string{"family-probe", "--by", "test"}, usage: []string{}},
		"pause topic":          {json: []string{"family.probe", "--by", "test"}, usage: []string{"a", "b"}},
		// Never paused: nothing to resume, exit 1 as documented, and the JSON says so.
		"resume consumer": {json: []string{"never-paused"}, code: 1, usage: []string{}},
		"resume topic":    {json: []string{"never.paused"}, code: 1, usage: []string{"a", "b"}},
		"paused":          {usage: []string{"extra"}},
		"ui": {noJSON: "it serves the console until interrupted and prints no JSON",
			usage: []string{"extra", "--addr", "127.0.0.1:0"}},
	}
	seen := map[string]bool{}
	for _, c := range commands {
		seen[c.name] = true
		fc, ok := cases[c.name]
		if !ok {
			t.Errorf("txinbox %s has no case in TestEveryCommandJSONAndUsage: add its --json run and a usage error (or why it has no --json run)", c.name)
			continue
		}
		words := strings.Fields(c.name)
		if fc.noJSON == "" {
			args := append(append(append([]string{"--schema", db.Schema}, words...), fc.json...), "--json")
			r := cli(t, db.URL, args...)
			out := bytes.TrimSpace([]byte(r.stdout))
			switch {
			case r.code != fc.code:
				t.Errorf("txinbox %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args[2:], " "), r.code, fc.code, r.stdout, r.stderr)
			case !json.Valid(out) || len(out) == 0 || (out[0] != '{' && out[0] != '['):
				t.Errorf("txinbox %s: stdout is not one JSON object or array:\n%s\nstderr: %s", strings.Join(args[2:], " "), r.stdout, r.stderr)
			case fc.code != 0 && r.stderr == "":
				t.Errorf("txinbox %s: exit %d with nothing on stderr", strings.Join(args[2:], " "), r.code)
			}
		} else if fc.json != nil {
			t.Errorf("txinbox %s: a case with both a --json run and a reason for having none", c.name)
		}
		// A usage error, with the database given (so that it is the arguments that are refused)
		// and --json (a script's call): exit 2, nothing on stdout.
		args := append(append(append([]string{"--schema", db.Schema}, words...), fc.usage...), "--json")
		r := cli(t, db.URL, args...)
		if r.code != exitUsage || r.stdout != "" || !strings.Contains(r.stderr, "Run 'txinbox ") || !strings.Contains(r.stderr, " --help' for usage.") {
			t.Errorf("txinbox %s: exit %d, want %d (a usage error), nothing on stdout and a pointer to --help on stderr\nstdout: %s\nstderr: %s",
				strings.Join(args[2:], " "), r.code, exitUsage, r.stdout, r.stderr)
		}
	}
	for name := range cases {
		if !seen[name] {
			t.Errorf("case %q names no command of the table", name)
		}
	}
}
