package worker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/worker"
)

// A claim that stalls on the server after it has locked the rows it picked (here a row security
// policy sleeps in the claims of the pool that connects as a role of its own, once its rows are
// locked) is cancelled there at ClaimTimeout: its batch transaction rolls back, its rows go back to
// the other workers, which handle every message once. Without the bound, the stalled claim kept its
// batch locked for as long as it ran, and every other claim skipped those rows: in CI a claim
// starved for over a minute left 1,500 ready messages untouched (TestBatchHandlerConcurrentPools
// ExactlyOnce, "drain: stuck").
func TestStalledClaimReleasesItsRowsAtClaimTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.receive(t, keys("m", 20)...)
	e.stalledAndGoodPools(t, "ClaimBatch", 20)
}

// The rescuer's claim of suspects is bounded as well: stalled, it held them (and, for a message taken
// alone, the consumer's lock that lets one such message run at a time, across processes), and no
// other pool's rescuer could take any of them over.
func TestStalledRescueClaimReleasesTheRescueLockAtClaimTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.receive(t, keys("m", 3)...)
	// A crashed worker's messages, charged and isolated: each runs alone next.
	if _, err := e.Pool.Exec(context.Background(), e.SQL(`UPDATE {schema}.inbox_queue
		SET token = token + 1, attempts_started = 1, isolate = 1, group_size = 1`)); err != nil {
		t.Fatal(err)
	}
	e.stalledAndGoodPools(t, "ClaimSuspects", 3)
}

// stalledAndGoodPools makes the claims of a pool stall once they have locked their rows: the pool
// connects as a role of its own, for which a row security policy on inbox (read by the claim after
// its locks) sleeps. It starts that pool with a claim bound of 300ms, waits until its claim
// statement (query names it) sleeps, starts a second pool, and checks that the second completes all
// n messages, once each, and that the stuck pool logged its claims cancelled by the server.
func (e *env) stalledAndGoodPools(t *testing.T, query string, n int64) {
	t.Helper()
	stuckDB := e.stallingRole(t)
	logs := &logBuffer{}
	stuck := worker.NewHandlers()
	worker.Handle(stuck, "credit", func(context.Context, pgx.Tx, *worker.Message[credit]) error {
		t.Error("the stuck pool's claim completed")
		return nil
	})
	run(t, batchPoolOn(t, txinbox.Store{DB: stuckDB, Schema: e.Schema, Logger: logs.logger()}, stuck, func(c *worker.Config) {
		c.Owner, c.Concurrency = "stuck", 1
		worker.SetClaimTimeout(c, 300*time.Millisecond)
		worker.NoListen(c)
	}))
	stalled := `SELECT count(*) FROM pg_stat_activity
		WHERE wait_event = 'PgSleep' AND query LIKE '%' || $1 || '%' AND query LIKE '%' || $2 || '%'`
	if e.distributed(t) {
		// On a Citus coordinator the claim runs on the worker holding the consumer's shard, where the
		// policy sleeps: the coordinator's claim statement, and its task sleeping on a worker (same
		// global_pid).
		stalled = `SELECT count(*) FROM citus_stat_activity c JOIN citus_stat_activity w USING (global_pid)
			WHERE NOT c.is_worker_query AND c.query LIKE '%' || $1 || '%' AND c.query LIKE '%' || $2 || '%'
			AND w.is_worker_query AND w.wait_event = 'PgSleep'`
	}
	waitFor(t, "the stuck pool's claim to stall", func() bool { return e.Count(t, stalled, query, e.Schema) > 0 })

	good := worker.NewHandlers()
	worker.Handle(good, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		return applyCredit(ctx, tx, e.Schema, m)
	})
	run(t, e.pool(t, good, func(c *worker.Config) { c.Owner = "good"; worker.NoListen(c) }))
	waitFor(t, "every message completed by the other pool", func() bool { return e.count(t, "completed") == n })
	if got := e.Count(t, `SELECT count(*) FROM {schema}.effects`); got != n {
		t.Fatalf("effects = %d, want %d", got, n)
	}
	// The stuck pool logs its cancelled claim once the error has reached it, which may be after the
	// other pool, given the released rows, has completed them all.
	waitFor(t, `the stuck pool to log "claim failed" cancelled by statement_timeout (SQLSTATE 57014)`, func() bool {
		for _, r := range logs.find(t, "txinbox: claim failed") {
			if err, _ := r["err"].(string); strings.Contains(err, "57014") {
				return true
			}
		}
		return false
	})
}

// distributed reports whether the schema's inbox_queue is a distributed table of a Citus cluster.
func (e *env) distributed(t *testing.T) bool {
	t.Helper()
	if e.Count(t, `SELECT count(*) FROM pg_extension WHERE extname = 'citus'`) == 0 {
		return false
	}
	return e.Count(t, `SELECT count(*) FROM pg_dist_partition WHERE logicalrelid = to_regclass($1)`,
		pgx.Identifier{e.Schema, "inbox_queue"}.Sanitize()) > 0
}

// stallingRole creates a login role of its own (dropped when t ends) with every privilege on the
// schema's tables, and a row security policy on inbox under which every row read by that role takes
// 600 s; it returns a pool connected as that role. The policy's expression is a comparison of a
// function's result: Citus refuses a subquery in a policy of a distributed table, and re-parses the
// expression of a new policy in a way that fails on a subquery or an IS NOT NULL ("unrecognized node
// type").
func (e *env) stallingRole(t *testing.T) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	role := "txinbox_stuck_" + strings.TrimPrefix(e.Schema, "txinbox_test_")
	r := pgx.Identifier{role}.Sanitize()
	for _, stmt := range []string{
		`CREATE ROLE ` + r + ` LOGIN PASSWORD 'stuck'`,
		`GRANT USAGE ON SCHEMA {schema} TO ` + r,
		`GRANT ALL ON ALL TABLES IN SCHEMA {schema} TO ` + r,
		`GRANT ALL ON ALL SEQUENCES IN SCHEMA {schema} TO ` + r,
		`ALTER TABLE {schema}.inbox ENABLE ROW LEVEL SECURITY`,
		`CREATE POLICY everyone ON {schema}.inbox USING (current_user <> ` + quote(role) + `)`,
		`CREATE POLICY stalled ON {schema}.inbox TO ` + r + ` USING (pg_sleep(600)::text = '')`,
	} {
		if _, err := e.Pool.Exec(ctx, e.SQL(stmt)); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, stmt := range []string{`DROP OWNED BY ` + r, `DROP ROLE ` + r} {
			if _, err := e.Pool.Exec(context.Background(), stmt); err != nil {
				t.Errorf("%s: %v", stmt, err)
			}
		}
	})
	cfg, err := pgxpool.ParseConfig(e.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.User, cfg.ConnConfig.Password = role, "stuck"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// The claim bound is derived from the Lease: 10s, or half the Lease if that is less (so always less
// than the Lease).
func TestClaimTimeoutDerivedFromLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	newPool := func(cfg worker.Config) (*worker.Pool, error) {
		cfg.Consumer, cfg.Handlers, cfg.Timeout = "ledger", worker.NewHandlers(), time.Second
		worker.Handle(cfg.Handlers, "credit", func(context.Context, pgx.Tx, *worker.Message[credit]) error { return nil })
		return worker.New(e.Store(), cfg)
	}
	for _, tc := range []struct{ lease, want time.Duration }{{0, 10 * time.Second}, {time.Hour, 10 * time.Second}, {4 * time.Second, 2 * time.Second}} {
		p, err := newPool(worker.Config{Lease: tc.lease})
		if err != nil {
			t.Fatal(err)
		}
		if got := worker.ClaimTimeoutOf(p); got != tc.want {
			t.Errorf("Lease %v: claim bound = %v, want %v", tc.lease, got, tc.want)
		}
	}
}
