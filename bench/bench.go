// Package bench measures txinbox against River and against raw SQL on one PostgreSQL server.
//
// Every system runs in a fresh schema of its own (named txbench_<system>_<random>), created before a
// run and dropped after it, so runs never see each other's rows, dead tuples or statistics. The
// benchmarks run one at a time: on a small machine two of them at once would only measure each
// other. The command github.com/txinbox/txinbox/bench/cmd/txbench runs them all and writes
// RESULTS.md; bench_test.go wraps the main ones for `go test -bench`.
package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultURL is the server used when none is given.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// SchemaPrefix starts the name of every schema the benchmarks create.
const SchemaPrefix = "txbench_"

// Env is the connection to the server under test and the settings shared by every benchmark.
type Env struct {
	URL   string
	Admin *pgxpool.Pool // a few connections for set-up, tear-down and monitoring
	Log   *slog.Logger  // progress; io.Discard by default
	Quick bool
	Reuse bool // keep schemas (for debugging); default false: every schema is dropped after its run
	// Tracer, if set, traces the statements of every benchmark pool (see StatementStats).
	Tracer pgx.QueryTracer
	// Distribute makes every txinbox schema's tables distributed by consumer (migrate.Distribute):
	// URL is then a Citus coordinator (txbench --citus-url).
	Distribute bool
	// QuietWaited is how long WaitQuiet has waited for other processes so far.
	QuietWaited time.Duration
	// NoisyPhases lists the phases (by application_name) that started with the machine busy anyway.
	NoisyPhases []string
	quietBudget time.Duration
	counts      map[string]int
	lock        *pgx.Conn // holds runLockKey (LockRuns) until Close
}

// NewEnv connects to url.
func NewEnv(ctx context.Context, url string, quick bool, log *slog.Logger) (*Env, error) {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 4
	cfg.ConnConfig.RuntimeParams["application_name"] = "txbench-admin"
	admin, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := admin.Ping(ctx); err != nil {
		admin.Close()
		return nil, fmt.Errorf("txbench: %s does not answer: %w", url, err)
	}
	budget := 3 * time.Minute
	if quick {
		budget = 5 * time.Second
	}
	return &Env{URL: url, Admin: admin, Log: log, Quick: quick, quietBudget: budget, counts: map[string]int{}}, nil
}

// Close closes the admin pool, and the connection holding the run lock (LockRuns) if any.
func (e *Env) Close() {
	if e.lock != nil {
		_ = e.lock.Close(context.Background()) // closing the session releases the lock
	}
	e.Admin.Close()
}

// runLockKey is the session advisory lock that one txbench run holds on its server (LockRuns).
const runLockKey int64 = 0x7478626e6368 // "txbnch"

// LockRuns makes this the only benchmark run on the server until Close: it takes a session advisory
// lock on a connection of its own, waiting, with a line on the log, while another run holds it. Call
// it before DropStale, which drops every schema named txbench_* and so would pull the tables from
// under a run in progress; benchmarks run at the same time would also only measure each other.
func (e *Env) LockRuns(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, e.URL)
	if err != nil {
		return err
	}
	var got bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, runLockKey).Scan(&got); err != nil {
		_ = conn.Close(ctx)
		return err
	}
	if !got {
		e.Log.Warn("another benchmark run holds this server; waiting for it to end")
		if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, runLockKey); err != nil {
			_ = conn.Close(context.WithoutCancel(ctx))
			return err
		}
	}
	e.lock = conn
	return nil
}

// DropStale drops schemas left by an interrupted earlier run (every schema named txbench_*). Only
// one run may use a server at a time: take LockRuns first.
func (e *Env) DropStale(ctx context.Context) error {
	rows, err := e.Admin.Query(ctx, `SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1)`, SchemaPrefix)
	if err != nil {
		return err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, n := range names {
		e.Log.Info("dropping stale schema", "schema", n)
		if _, err := e.Admin.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{n}.Sanitize()+" CASCADE"); err != nil {
			return err
		}
	}
	return nil
}

// Schema is one fresh schema with a pool whose application_name identifies the system, so that
// the connections it opens can be counted in pg_stat_activity.
type Schema struct {
	Name string
	App  string // application_name of Pool's connections
	Pool *pgxpool.Pool
	env  *Env
}

// NewSchema creates a fresh schema for system, holding the ledger table every handler writes to,
// and a pool of at most maxConns connections.
func (e *Env) NewSchema(ctx context.Context, system string, maxConns int32) (*Schema, error) {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := SchemaPrefix + system + "_" + hex.EncodeToString(b)
	if _, err := e.Admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
		return nil, err
	}
	// The ledger has a unique event id, as in the project's own example: defence in depth.
	if _, err := e.Admin.Exec(ctx, "CREATE TABLE "+pgx.Identifier{name, "ledger"}.Sanitize()+
		" (event_id text PRIMARY KEY, amount bigint NOT NULL)"); err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(e.URL)
	if err != nil {
		return nil, err
	}
	e.counts[system]++
	app := fmt.Sprintf("txbench-%s-%d", system, e.counts[system])
	cfg.MaxConns = maxConns
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	if e.Tracer != nil {
		cfg.ConnConfig.Tracer = e.Tracer
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &Schema{Name: name, App: app, Pool: pool, env: e}, nil
}

// T returns the quoted, schema-qualified name of table.
func (s *Schema) T(table string) string { return pgx.Identifier{s.Name, table}.Sanitize() }

// Drop closes the pool and drops the schema.
func (s *Schema) Drop(ctx context.Context) {
	s.Pool.Close()
	if s.env.Reuse {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
	defer cancel()
	if _, err := s.env.Admin.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{s.Name}.Sanitize()+" CASCADE"); err != nil {
		s.env.Log.Error("drop schema", "schema", s.Name, "err", err)
	}
}

// Settle makes the starting point of a measured run the same for every system: it vacuums and
// analyzes the schema's tables (sets hint bits and the visibility map, and gives the planner
// statistics; autovacuum may be off on the server) and runs a checkpoint.
func (s *Schema) Settle(ctx context.Context) error {
	rows, err := s.env.Admin.Query(ctx, `SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relkind = 'r'`, s.Name)
	if err != nil {
		return err
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, t := range tables {
		if _, err := s.env.Admin.Exec(ctx, "VACUUM (ANALYZE) "+s.T(t)); err != nil {
			return err
		}
	}
	_, err = s.env.Admin.Exec(ctx, "CHECKPOINT")
	return err
}

// LedgerCount counts the ledger rows.
func (s *Schema) LedgerCount(ctx context.Context) (int64, error) {
	var n int64
	err := s.env.Admin.QueryRow(ctx, "SELECT count(*) FROM "+s.T("ledger")).Scan(&n)
	return n, err
}

// checkLedger verifies that the ledger holds exactly want rows: every message applied once.
func (s *Schema) checkLedger(ctx context.Context, want int) error {
	n, err := s.LedgerCount(ctx)
	if err != nil {
		return err
	}
	if n != int64(want) {
		return fmt.Errorf("ledger has %d rows, want %d", n, want)
	}
	return nil
}

// Median returns the median of xs (0 for none).
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Percentile returns the p-th percentile (0..100) of sorted ds, nearest rank.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p/100*float64(len(sorted))+0.5) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(sorted) {
		i = len(sorted) - 1
	}
	return sorted[i]
}

func payload(n int, amount int64) []byte {
	return fmt.Appendf(nil, `{"n":%d,"amount":%d}`, n, amount)
}

func eventKey(n int) string { return fmt.Sprintf("evt-%08d", n) }
