// Package citus runs txinbox on a Citus cluster (SCALING.md): the acceptance tests of packages inbox,
// worker, admin and retention against a coordinator with txinbox's tables distributed by consumer,
// and a check that every statement of the hot paths runs on one shard.
//
// Citus is in no package registry of this project's machines, so these tests skip unless
// TXINBOX_CITUS_URL names a coordinator (with the citus extension in that database). The run takes
// longer than go test's default 10-minute timeout; make citus sets the one it needs:
//
//	make citus CITUS_URL='postgres://postgres@127.0.0.1:9700/postgres?sslmode=disable'
package citus

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/retention"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
	"github.com/txinbox/txinbox/worker"
)

// EnvURL names the Citus coordinator the tests run against.
const EnvURL = "TXINBOX_CITUS_URL"

// acceptance selects the tests run on Citus: every test of the packages that receive, run, keep and
// administer messages (deduplication, exactly once under kills, fencing, ordering, dead letters and
// replay, batch handlers, retention, admin actions) and of the outbox and its relay (whose tables stay
// on the coordinator: migrate.DistributedTables), each package's own tests unchanged, with
// testdb.EnvDistribute set so that every test schema is distributed by consumer. Left out, because
// they observe one server's internals rather than txinbox's guarantees: the late-commit tests (they
// wait to see a receive blocked in the coordinator's lock table; on Citus it blocks on a worker), the
// vacuum, analyze, HOT-update and health tests (they read the coordinator's table statistics, which
// count no shard row, and hold snapshots in databases of their own, which have no citus extension),
// the cleaner test that watches its deletes through statement triggers on inbox (Citus has no
// statement triggers on a distributed table), and the tests of statements' plans under forced generic plans (inbox's
// GenericPlan tests, worker's and outbox's GenericPlansAreLinear, retention's ReceivePlanProbesKeysAfterRotation:
// the coordinator refuses to make a distributed plan then, "could not create distributed plan"; each
// shard's statement is planned on its worker). SCALING.md lists them as not tested.
var acceptance = []struct{ pkg, run, skip string }{
	{"./inbox", ".", "LateCommit|GenericPlan"},
	{"./worker", ".", "Vacuum|Analyzes|HOT|Health|Horizon|GenericPlans"},
	{"./admin", ".", "Health"},
	{"./retention", ".", "CleanBatchesInterleaveWithWork|ReceivePlanProbesKeysAfterRotation"},
	{"./outbox", ".", "GenericPlans"},
}

// reportMargin is what a package's go test is given less than the time left: its -timeout counts
// from the start of its test binary, after the build, which took over a minute with -race on a
// loaded machine (the whole run then timed out before the package could report).
const reportMargin = 5 * time.Minute

func coordinator(t *testing.T) string {
	t.Helper()
	url := os.Getenv(EnvURL)
	if url == "" {
		t.Skip(EnvURL + " is not set: no Citus coordinator to run on (SCALING.md says how to make one)")
	}
	return url
}

// TestAcceptanceOnCitus runs the acceptance tests of the core packages against the coordinator, one
// package after the other, with -race when this test has it. Each package's go test gets the time
// left before this test's own deadline (-timeout), less reportMargin, so that a package that runs
// too long fails with its own report and does not outlive this test.
func TestAcceptanceOnCitus(t *testing.T) {
	url := coordinator(t)
	root := moduleRoot(t)
	for _, a := range acceptance {
		t.Run(strings.TrimPrefix(a.pkg, "./"), func(t *testing.T) {
			timeout := 40 * time.Minute
			if deadline, ok := t.Deadline(); ok {
				timeout = time.Until(deadline) - reportMargin
				if timeout < time.Minute {
					t.Fatalf("%v left before -timeout: too little to run %s (make citus sets the timeout the run needs)", time.Until(deadline).Round(time.Second), a.pkg)
				}
			}
			args := []string{"test", "-count=1", "-timeout", timeout.Round(time.Second).String(), "-run", a.run}
			if a.skip != "" {
				args = append(args, "-skip", a.skip)
			}
			if raceEnabled {
				args = append(args, "-race")
			}
			cmd := exec.Command("go", append(args, a.pkg)...)
			cmd.Dir = root
			cmd.Env = append(os.Environ(), testdb.EnvURL+"="+url, testdb.EnvDistribute+"=1")
			out, err := cmd.CombinedOutput()
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			t.Logf("go %s\n%s", strings.Join(cmd.Args[1:], " "), tail(lines, 3))
			if err != nil {
				t.Fatalf("on Citus: %v\nfailures:\n%s\nlast lines:\n%s", err, failures(lines, 120), tail(lines, 40))
			}
		})
	}
}

// TestStatementsRouteToOneShard receives, runs, retries, kills and cleans messages of two consumers
// on the coordinator while recording every statement txinbox sends, then EXPLAINs each with its
// arguments: every statement that touches a distributed table runs as a single task on one shard,
// but for the reads that list consumers or find the highest id, which span the consumers by nature:
// MaxMessageID, NextConsumer, and RollupConsumers (the maintainer's list of the consumers whose
// counts it folds, once per RollupInterval).
func TestStatementsRouteToOneShard(t *testing.T) {
	url := coordinator(t)
	ctx := context.Background()
	t.Setenv(testdb.EnvURL, url)
	t.Setenv(testdb.EnvDistribute, "1")
	schema, _ := testdb.NewSchema(t)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	if err := testdb.Migrate(ctx, cfg.ConnConfig, schema); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{seen: map[string]traced{}}
	cfg.ConnConfig.Tracer = rec
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := txinbox.Store{DB: pool, Schema: schema, Retention: time.Millisecond}

	c, err := inbox.New(store, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var done sync.WaitGroup
	for _, consumer := range []string{"ledger", "mailer"} {
		var msgs []inbox.Message
		for i, key := range []string{"ok-1", "ok-2", "retry", "dead"} {
			msgs = append(msgs, inbox.Message{Consumer: consumer, Key: key, Kind: "k", OrderingKey: []string{"a", "a", "b", ""}[i],
				Payload: json.RawMessage(`{"n":1}`)})
		}
		if _, err := c.ReceiveMany(ctx, msgs); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Receive(ctx, msgs[0]); err != nil { // a duplicate
			t.Fatal(err)
		}
		// A batch left behind by a process that died (its transaction too old to be known): the
		// rescuer charges it (ChargeBatch) and takes its message over (ClaimSuspects).
		crashed, err := c.Receive(ctx, inbox.Message{Consumer: consumer, Key: "crashed", Kind: "k", Payload: json.RawMessage(`{"n":1}`)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, "INSERT INTO "+pgx.Identifier{schema, "inbox_batch"}.Sanitize()+
			" (consumer, xid, ids, owner) VALUES ($1, '3', ARRAY[$2::bigint], 'killed')", consumer, crashed.ID); err != nil {
			t.Fatal(err)
		}
		hs := worker.NewHandlers()
		var tries sync.Map
		worker.Handle(hs, "k", func(ctx context.Context, tx pgx.Tx, m *worker.Message[json.RawMessage]) error {
			switch m.Key {
			case "dead":
				return txinbox.Permanent(errFailed)
			case "retry":
				if _, again := tries.LoadOrStore(consumer, true); !again {
					return errFailed
				}
			}
			return nil
		})
		p, err := worker.New(store, worker.Config{Consumer: consumer, Handlers: hs, PollInterval: 20 * time.Millisecond,
			Backoff: txinbox.BackoffFunc(func(int) time.Duration { return time.Millisecond })})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Start(ctx); err != nil {
			t.Fatal(err)
		}
		done.Add(1)
		go func() {
			defer done.Done()
			deadline := time.Now().Add(time.Minute)
			for time.Now().Before(deadline) {
				var queued int
				if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "inbox_queue"}.Sanitize()+" WHERE consumer = $1", consumer).Scan(&queued); err == nil && queued == 0 {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_ = p.Stop(sctx)
		}()
	}
	done.Wait()
	if _, err := retention.Clean(ctx, store, retention.CleanOptions{}); err != nil {
		t.Fatal(err)
	}
	// Rotations (every consumer's rows, by design: they run on every shard) between receives: the
	// messages received before are duplicates after them.
	for range 3 {
		if r, err := retention.Rotate(ctx, store, retention.RotateOptions{Force: true}); err != nil || !r.Rotated {
			t.Fatalf("rotate: %+v %v", r, err)
		}
		for _, consumer := range []string{"ledger", "mailer"} {
			r, err := c.Receive(ctx, inbox.Message{Consumer: consumer, Key: "dead", Kind: "k", Payload: json.RawMessage(`{"n":1}`)})
			if err != nil || r.Outcome != inbox.Duplicate {
				t.Fatalf("%s: dead letter received again after a rotation: %+v %v", consumer, r, err)
			}
		}
	}

	explain, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer explain.Close(ctx)
	multiShardReads := map[string]bool{"MaxMessageID": true, "NextConsumer": true, "RollupConsumers": true}
	tasks := regexp.MustCompile(`Task Count: (\d+)`)
	var names []string
	for name, q := range rec.snapshot() {
		names = append(names, name)
		rows, err := explain.Query(ctx, "EXPLAIN "+q.sql, q.args...)
		if err != nil {
			t.Errorf("EXPLAIN %s: %v", name, err)
			continue
		}
		var plan []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, line)
		}
		if err := rows.Err(); err != nil {
			t.Errorf("EXPLAIN %s: %v", name, err)
			continue
		}
		for _, m := range tasks.FindAllStringSubmatch(strings.Join(plan, "\n"), -1) {
			if m[1] != "1" && !multiShardReads[name] {
				t.Errorf("%s runs %s tasks, not one shard:\n%s", name, m[1], strings.Join(plan, "\n"))
				break
			}
		}
	}
	slices.Sort(names)
	t.Logf("checked %d statements: %s", len(names), strings.Join(names, " "))
	for _, want := range []string{"ReceiveBatch", "RegisterConsumer", "ClaimBatch", "RecordBatch", "FinishBatch", "ReadyNext",
		"ListBatches", "XactStatuses", "ChargeBatch", "ClaimSuspects", "SnoozeBlocked", "CleanExpiredRange", "Rotate"} {
		if _, ok := rec.snapshot()[want]; !ok {
			t.Errorf("%s was never run (recorded: %v)", want, names)
		}
	}
}

var errFailed = errors.New("failed")

// recorder records the first run of every named statement (sqlc's "-- name: X" line) with its
// arguments, whether it is sent alone (pgx.QueryTracer) or in a pipeline (pgx.BatchTracer: the
// worker's claims go as a pgx.Batch of the statement_timeout bound and the claim).
type recorder struct {
	mu   sync.Mutex
	seen map[string]traced
}

type traced struct {
	sql  string
	args []any
}

var nameLine = regexp.MustCompile(`^-- name: (\w+)`)

var (
	_ pgx.QueryTracer = (*recorder)(nil)
	_ pgx.BatchTracer = (*recorder)(nil)
)

func (r *recorder) record(sql string, args []any) {
	if m := nameLine.FindStringSubmatch(sql); m != nil {
		r.mu.Lock()
		if _, ok := r.seen[m[1]]; !ok {
			r.seen[m[1]] = traced{sql: sql, args: args}
		}
		r.mu.Unlock()
	}
}

func (r *recorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.record(d.SQL, d.Args)
	return ctx
}

func (r *recorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *recorder) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

// TraceBatchQuery is called for each statement of a pipeline as its result is read.
func (r *recorder) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	r.record(d.SQL, d.Args)
}

func (r *recorder) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (r *recorder) snapshot() map[string]traced {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]traced, len(r.seen))
	for k, v := range r.seen {
		out[k] = v
	}
	return out
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// failures returns, of a go test's output, the lines that report a failure (a failed test, a test's
// own error lines, a panic and the lines after it, a timeout), at most n: the logs of the tests
// running beside it (a pool's, a maintainer's) bury them before the output's tail.
func failures(lines []string, n int) string {
	var out []string
	after := 0 // lines still to keep after a panic
	for _, l := range lines {
		t := strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(t, "panic:"):
			after = 30
		case after > 0:
			after--
		case strings.HasPrefix(t, "--- FAIL"), testErrorLine.MatchString(t):
		default:
			continue
		}
		if out = append(out, l); len(out) >= n {
			break
		}
	}
	return strings.Join(out, "\n")
}

// testErrorLine is a line that t.Error, t.Fatal or t.Log wrote: file_test.go:line: text.
var testErrorLine = regexp.MustCompile(`^\S+_test\.go:\d+: `)

func tail(lines []string, n int) string {
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
