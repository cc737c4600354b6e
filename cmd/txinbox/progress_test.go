package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"
)

// The progress line says the rows done (of the total when known), their rate, the share done and the
// time left when the share is known, and the time elapsed.
func TestProgressLine(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		s       status
		elapsed time.Duration
		want    string
	}{
		{status{what: "dead replay", unit: "dead letters", done: 1500, total: 6000}, 3 * time.Second,
			"dead replay: 1,500 of 6,000 dead letters, 500/s, 25%, 3s elapsed, 9s left"},
		{status{what: "discard-older", unit: "messages deleted", done: 12000, share: 0.4}, 4 * time.Second,
			"discard-older: 12,000 messages deleted, 3,000/s, 40%, 4s elapsed, 6s left"},
		{status{what: "clean", unit: "messages deleted", done: 2000, approx: true}, 2 * time.Second,
			"clean: ~2,000 messages deleted, 1,000/s, 2s elapsed"},
		{status{what: "rotate", done: -1}, 12*time.Second + 400*time.Millisecond, "rotate: 12s elapsed"},
		{status{what: "dead discard", unit: "dead letters", done: 0, total: 10}, 0, "dead discard: 0 of 10 dead letters, 0s elapsed"},
		{status{what: "dead discard", unit: "dead letters", done: 10, total: 10}, 2 * time.Second, "dead discard: 10 of 10 dead letters, 5/s, 100%, 2s elapsed"},
	} {
		if got := c.s.line(c.elapsed); got != c.want {
			t.Errorf("line after %v of %+v:\n got %q\nwant %q", c.elapsed, c.s, got, c.want)
		}
	}
}

// runIn runs the command line in this process, with stdout and stderr taken for terminals when
// terminal is true (an honest fake: the check is injected, the drawing is the real one), and
// progress drawn at every update.
func runIn(t *testing.T, databaseURL string, terminal bool, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := runWith(databaseURL, &stdout, &stderr, terminal, args...)
	return result{stdout: stdout.String(), stderr: stderr.String(), code: code}
}

// inProcess lets one command line at a time run in this process: a command binds its flags to
// variables of the command table's (the binary runs one command per process), so that two running
// at once would set each other's.
var inProcess sync.Mutex

// runWith is runIn writing to stdout and stderr; it returns the exit status.
func runWith(databaseURL string, stdout, stderr io.Writer, terminal bool, args ...string) int {
	inProcess.Lock()
	defer inProcess.Unlock()
	getenv := func(k string) string {
		if k == "DATABASE_URL" {
			return databaseURL
		}
		return ""
	}
	a := newApp(context.Background(), stdout, stderr, getenv, func(io.Writer) bool { return terminal })
	a.every = 0
	return a.run(args)
}

// progressLines returns the progress lines drawn on stderr (each starts with a carriage return and
// ends by erasing the rest of the line), and whether the last thing drawn erased the line.
func progressLines(stderr string) (lines []string, erased bool) {
	for _, part := range strings.Split(stderr, "\r")[1:] {
		line, ok := strings.CutSuffix(part, "\x1b[K")
		if ok && line != "" {
			lines = append(lines, line)
		}
	}
	return lines, strings.HasSuffix(stderr, "\r\x1b[K")
}

// On a terminal, bulk dead replay and discard, discard-older, clean and rotate draw their progress on
// stderr, and erase it before the result is printed on stdout.
func TestProgressOnTerminal(t *testing.T) {
	t.Parallel()
	db, _ := seed(t)
	s := db.Schema
	r := runIn(t, db.URL, true, "--schema", s, "dead", "discard", "--all", "--consumer", "ledger")
	r.want(t, 0, "discarded 2 dead letter(s)", "dead discard: ")
	lines, erased := progressLines(r.stderr)
	if !erased || len(lines) < 2 || lines[0] != "dead discard: 0s elapsed" || !strings.HasPrefix(lines[len(lines)-1], "dead discard: 2 of 2 dead letters, ") {
		t.Fatalf("progress of dead discard: %q (erased: %v)", lines, erased)
	}
	r = runIn(t, db.URL, true, "--schema", s, "dead", "replay", "--all")
	r.want(t, 0, "replayed 1 dead letter(s)", "dead replay: ")
	if lines, _ := progressLines(r.stderr); !strings.HasPrefix(lines[len(lines)-1], "dead replay: 1 of 1 dead letters, ") {
		t.Fatalf("progress of dead replay: %q", lines)
	}
	r = runIn(t, db.URL, true, "--schema", s, "discard-older", "--older-than", "1d")
	r.want(t, 0, "discarded 1 message(s)", "discard-older: ")
	if lines, erased := progressLines(r.stderr); !erased || !strings.HasPrefix(lines[len(lines)-1], "discard-older: 1 messages deleted, ") ||
		!strings.Contains(lines[len(lines)-1], "100%") {
		t.Fatalf("progress of discard-older: %q (erased: %v)", lines, erased)
	}
	r = runIn(t, db.URL, true, "--schema", s, "clean")
	r.want(t, 0, "deleted 0 expired message(s)", "clean: ")
	r = runIn(t, db.URL, true, "--schema", s, "rotate")
	r.want(t, 0, "generation 1 begun", "rotate: ")
	if lines, erased := progressLines(r.stderr); !erased || lines[0] != "rotate: 0s elapsed" {
		t.Fatalf("progress of rotate: %q (erased: %v)", lines, erased)
	}
}

// With --json, or when stdout or stderr is not a terminal, nothing but the result is printed.
func TestProgressQuiet(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--json", "dead", "replay", "--all"},
		{"--json", "dead", "discard", "--all", "--yes"},
		{"--json", "discard-older", "--older-than", "1d"},
		{"--json", "clean"},
		{"--json", "rotate"},
	} {
		db, _ := seed(t)
		r := runIn(t, db.URL, true, append([]string{"--schema", db.Schema}, args...)...)
		if r.code != 0 || r.stderr != "" || !strings.HasPrefix(r.stdout, "{") {
			t.Errorf("txinbox %q on a terminal: exit %d\nstdout:\n%s\nstderr (want empty):\n%q", args, r.code, r.stdout, r.stderr)
		}
		r = runIn(t, db.URL, false, append([]string{"--schema", db.Schema}, args[1:]...)...)
		if r.code != 0 || r.stderr != "" {
			t.Errorf("txinbox %q, not on a terminal: exit %d\nstderr (want empty):\n%q", args[1:], r.code, r.stderr)
		}
	}
	// The binary's own check: its stdout and stderr are pipes here.
	db, _ := seed(t)
	cli(t, db.URL, "--schema", db.Schema, "dead", "replay", "--all").want(t, 0, "replayed 3 dead letter(s)", "")
}
