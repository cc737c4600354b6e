package main

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/txinbox/txinbox/txinboxtest/outboxtest"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// bulkCommands returns the commands that take --all (the bulk commands: dead replay and discard,
// outbox dead replay and discard, ...), read from the command table, each with whether it takes
// --dry-run.
func bulkCommands() map[*command]bool {
	out := map[*command]bool{}
	for _, c := range commands {
		fs := newFlagSet(c.name)
		if c.flags != nil {
			c.flags(fs)
		}
		if fs.Lookup("all") != nil {
			out[c] = fs.Lookup("dry-run") != nil
		}
	}
	return out
}

// bulkRowsCase is how a test makes the rows of a bulk command's group dead: seed makes some dead
// (counted: those the command's scope args select) in a new schema, die makes one more of that scope
// dead, and dead reports whether a row is dead now.
type bulkRowsCase struct {
	scope []string // the scope flag and its value
	seed  func(t *testing.T) (db *testdb.DB, counted []int64)
	die   func(t *testing.T, db *testdb.DB) int64
	dead  func(t *testing.T, db *testdb.DB, id int64) bool
}

// bulkCases are the groups of the bulk commands.
var bulkCases = map[string]bulkRowsCase{
	"dead": {
		scope: []string{"--consumer", "ledger"},
		seed: func(t *testing.T) (*testdb.DB, []int64) {
			db, ids := seed(t) // dead: d1 and d2 of ledger, d3 of audit; p1 of ledger pending
			return db, []int64{ids["d1"], ids["d2"]}
		},
		die: func(t *testing.T, db *testdb.DB) int64 {
			// p1 dies as a worker would make it (queue row deleted, attempts spent), committed.
			var id int64
			if err := db.Pool.QueryRow(context.Background(), db.SQL(`WITH q AS (DELETE FROM {schema}.inbox_queue WHERE id = (SELECT id FROM {schema}.inbox WHERE key = 'p1'))
				UPDATE {schema}.inbox SET state = 'dead', completed_at = now(), attempts_started = 10, attempts_failed = 10,
					last_error = 'died after the count' WHERE key = 'p1' RETURNING id`)).Scan(&id); err != nil {
				t.Fatal(err)
			}
			return id
		},
		dead: func(t *testing.T, db *testdb.DB, id int64) bool {
			return db.Count(t, `SELECT count(*) FROM {schema}.inbox_dead WHERE id = $1`, id) == 1
		},
	},
	"outbox dead": {
		scope: []string{"--topic", "orders"},
		seed: func(t *testing.T) (*testdb.DB, []int64) {
			db, ids := seedOutbox(t) // dead: d1 and d2 of orders, d3 of audit
			return db, []int64{ids["d1"], ids["d2"]}
		},
		die: func(t *testing.T, db *testdb.DB) int64 {
			// A new event of orders, refused by a real relay.
			id := outboxtest.Publish(t, db, outboxEvent("orders", "late", "refused after the count", ""))[0]
			outboxtest.Drain(t, db, outboxtest.ByHeaders, nil)
			return id
		},
		dead: func(t *testing.T, db *testdb.DB, id int64) bool {
			return db.Count(t, `SELECT count(*) FROM {schema}.outbox WHERE id = $1 AND state = 'dead'`, id) == 1
		},
	},
}

// firstWrite is a stderr that runs hook once, at its first write (before writing).
type firstWrite struct {
	mu    sync.Mutex
	hook  func()
	fired bool
	buf   bytes.Buffer
}

func (w *firstWrite) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.fired {
		w.fired = true
		w.hook()
	}
	return w.buf.Write(p)
}

// Every bulk command with --all (every command of the table that takes --all) acts only on the rows
// it counted when it started: a row that dies after the count, before the first page is read, is
// left alone (still dead), and a dry run does not list it. The command is run in this process on a
// terminal, so that it draws its progress at once after the count: the first write on stderr makes
// one more row of the command's scope die. Its progress then counts the rows counted ("of 2").
func TestBulkAllActsOnlyOnTheRowsCounted(t *testing.T) {
	t.Parallel()
	bulk := bulkCommands()
	if len(bulk) == 0 {
		t.Fatal("the command table has no command taking --all")
	}
	for c, takesDryRun := range bulk {
		group := c.name[:strings.LastIndex(c.name, " ")]
		rc, ok := bulkCases[group]
		if !ok {
			t.Fatalf("no case for the rows of %q (group %q): add one to bulkCases", c.name, group)
		}
		runs := []bool{false}
		if takesDryRun {
			runs = append(runs, true)
		}
		for _, dryRun := range runs {
			name := c.name
			if dryRun {
				name += " --dry-run"
			}
			t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
				t.Parallel()
				db, counted := rc.seed(t)
				slices.Sort(counted) // as a result lists them
				var late int64
				stderr := &firstWrite{hook: func() { late = rc.die(t, db) }}
				var stdout bytes.Buffer
				args := append([]string{"--schema", db.Schema}, strings.Fields(c.name)...)
				args = append(append(args, "--all"), rc.scope...)
				if dryRun {
					args = append(args, "--dry-run")
				}
				code := runWith(db.URL, &stdout, stderr, true, args...)
				stderr.mu.Lock()
				fired, errText := stderr.fired, stderr.buf.String()
				stderr.mu.Unlock()
				if code != 0 || !fired {
					t.Fatalf("txinbox %q: exit %d, stderr written: %v\nstdout:\n%s\nstderr:\n%q", args, code, fired, stdout.String(), errText)
				}
				lines, _ := progressLines(errText)
				total := fmt.Sprintf(" of %d ", len(counted))
				if len(lines) < 2 || !strings.Contains(lines[len(lines)-1], total) {
					t.Fatalf("txinbox %q: progress %q: want its last line to count the %d rows counted before %d died", args, lines, len(counted), late)
				}
				if !rc.dead(t, db, late) {
					t.Errorf("txinbox %q: %d, which died after the count, is no longer dead\nstdout:\n%s", args, late, stdout.String())
				}
				acted := actedOn(stdout.String())
				if slices.Contains(acted, late) {
					t.Errorf("txinbox %q reports acting on %d, which died after the count:\n%s", args, late, stdout.String())
				}
				if !slices.Equal(acted, counted) {
					t.Errorf("txinbox %q acted on %v, want the rows counted %v:\n%s", args, acted, counted, stdout.String())
				}
				for _, id := range counted {
					if got := rc.dead(t, db, id); got != dryRun {
						t.Errorf("txinbox %q: %d, counted: dead %v after the command, want %v", args, id, got, dryRun)
					}
				}
			})
		}
	}
}

// actedOn returns the ids listed on the first line of a bulk command's text result ("replayed 2 dead
// letter(s): 3, 4", "dry run: would discard ..."), in the order listed.
func actedOn(stdout string) []int64 {
	first, _, _ := strings.Cut(stdout, "\n")
	_, list, ok := strings.Cut(first, ": ")
	if strings.HasPrefix(first, "dry run: ") {
		_, list, ok = strings.Cut(strings.TrimPrefix(first, "dry run: "), ": ")
	}
	if !ok {
		return nil
	}
	var ids []int64
	for _, s := range strings.Split(list, ", ") {
		if id, err := strconv.ParseInt(s, 10, 64); err == nil {
			ids = append(ids, id)
		}
	}
	return ids
}
