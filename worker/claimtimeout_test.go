package worker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/worker"
)

// A claim that stalls on the server after it has locked the rows it picked (here a trigger sleeps in
// the claims of the pool whose Owner is "stuck") is cancelled there at ClaimTimeout: its rows go
// back to the other workers, which handle every message once. Without the bound, the stalled claim
// kept its batch locked for as long as it ran, and every other claim skipped those rows: in CI a
// claim starved for over a minute left 1,500 ready messages untouched (TestBatchHandlerConcurrentPools
// ExactlyOnce, "drain: stuck").
func TestStalledClaimReleasesItsRowsAtClaimTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.receive(t, keys("m", 20)...)
	e.stalledAndGoodPools(t, e.Pool, "ClaimBatch", 20)
}

// On a DB that cannot pipeline (no SendBatch; here a wrapper hides it), the bound and the claim run in
// a transaction of their own, and a stalled claim is cancelled the same way.
func TestStalledClaimOnADBWithoutSendBatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.receive(t, keys("m", 20)...)
	e.stalledAndGoodPools(t, noSendBatch{e.Pool}, "ClaimBatch", 20)
}

// noSendBatch is a txinbox.DB without SendBatch.
type noSendBatch struct{ txinbox.DB }

// The rescuer's claim of a message whose lease ended is bounded as well: stalled, it held the
// consumer's rescue lock (one rescue claim at a time, across processes), and no other pool's rescuer
// could take over any message of a crashed worker.
func TestStalledRescueClaimReleasesTheRescueLockAtClaimTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.receive(t, keys("m", 3)...)
	// A crashed worker's claims: claimed, their lease over.
	if _, err := e.Pool.Exec(context.Background(), e.SQL(`UPDATE {schema}.inbox_queue
		SET claimed = true, owner = 'crashed', token = token + 1, attempts_started = 1, run_at = now() - interval '1 second'`)); err != nil {
		t.Fatal(err)
	}
	e.stalledAndGoodPools(t, e.Pool, "ClaimSuspect", 3)
}

// stalledAndGoodPools makes the claims of a pool whose Owner is "stuck" sleep (a trigger, once they
// have locked their rows), starts that pool on db with a ClaimTimeout of 300ms, waits until its claim
// statement (query names it) sleeps, starts a second pool, and checks that the second completes all n
// messages, once each, and that the stuck pool logged its claims cancelled by the server.
//
// On a Citus coordinator (internal/citus distributes the schema) the claim's update runs on the
// worker holding the consumer's shard: the trigger is created on the distributed table, which puts it
// on every shard, and the sleep is looked for on the workers, in the task of the coordinator's claim
// statement. The bound is set on the coordinator; when it cancels the claim there, Citus cancels the
// shard's statement too, and the shard's rows are released.
func (e *env) stalledAndGoodPools(t *testing.T, db txinbox.DB, query string, n int64) {
	t.Helper()
	ctx := context.Background()
	citus := e.distributed(t)
	err := pgx.BeginFunc(ctx, e.Pool, func(tx pgx.Tx) error {
		// Citus refuses a trigger on a distributed table unless citus.enable_unsafe_triggers is on;
		// it then creates the function on the workers and the trigger on every shard. It forwards a
		// statement's query string to the workers, which refuse several commands in one: one
		// statement per Exec.
		stmts := []string{`
			CREATE FUNCTION {schema}.stall() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN
				IF NEW.owner = 'stuck' AND OLD.owner IS DISTINCT FROM 'stuck' THEN
					PERFORM pg_sleep(600);
				END IF;
				RETURN NEW;
			END $$`,
			`CREATE TRIGGER stall BEFORE UPDATE ON {schema}.inbox_queue FOR EACH ROW EXECUTE FUNCTION {schema}.stall()`}
		if citus {
			stmts = append([]string{`SET LOCAL citus.enable_unsafe_triggers = on`}, stmts...)
		}
		for _, stmt := range stmts {
			if _, err := tx.Exec(ctx, e.SQL(stmt)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	stuck := worker.NewHandlers()
	worker.Handle(stuck, "credit", func(context.Context, pgx.Tx, *worker.Message[credit]) error {
		t.Error("the stuck pool's claim completed")
		return nil
	})
	run(t, batchPool(t, e, db, stuck, func(c *worker.Config) {
		c.Owner, c.Concurrency, c.ClaimTimeout, c.Logger, c.DisableListen = "stuck", 1, 300*time.Millisecond, logs.logger(), true
	}))
	stalled := `SELECT count(*) FROM pg_stat_activity
		WHERE wait_event = 'PgSleep' AND query LIKE '%' || $1 || '%' AND query LIKE '%' || $2 || '%'`
	if citus {
		// The coordinator's claim statement, and its task sleeping on a worker (same global_pid).
		stalled = `SELECT count(*) FROM citus_stat_activity c JOIN citus_stat_activity w USING (global_pid)
			WHERE NOT c.is_worker_query AND c.query LIKE '%' || $1 || '%' AND c.query LIKE '%' || $2 || '%'
			AND w.is_worker_query AND w.wait_event = 'PgSleep'`
	}
	waitFor(t, "the stuck pool's claim to stall", func() bool { return e.Count(t, stalled, query, e.Schema) > 0 })

	good := worker.NewHandlers()
	worker.Handle(good, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		return applyCredit(ctx, tx, e.Schema, m)
	})
	run(t, e.pool(t, good, func(c *worker.Config) { c.Owner = "good"; c.DisableListen = true }))
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

// ClaimTimeout defaults to 10s or half the Lease, and must be less than the Lease.
func TestClaimTimeoutDefaultAndCheck(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	newPool := func(cfg worker.Config) (*worker.Pool, error) {
		cfg.Consumer, cfg.Handlers, cfg.Timeout = "ledger", worker.NewHandlers(), time.Second
		worker.Handle(cfg.Handlers, "credit", func(context.Context, pgx.Tx, *worker.Message[credit]) error { return nil })
		return worker.New(e.Store(), cfg)
	}
	_, err := newPool(worker.Config{Lease: time.Minute, ClaimTimeout: time.Minute})
	var ce *txinbox.ConfigError
	if !errors.As(err, &ce) || ce.Field != "ClaimTimeout" {
		t.Fatalf("ClaimTimeout = Lease: err = %v, want a *txinbox.ConfigError on ClaimTimeout", err)
	}
	for _, tc := range []struct{ lease, want time.Duration }{{0, worker.DefaultClaimTimeout}, {4 * time.Second, 2 * time.Second}} {
		p, err := newPool(worker.Config{Lease: tc.lease})
		if err != nil {
			t.Fatal(err)
		}
		if got := worker.ClaimTimeoutOf(p); got != tc.want {
			t.Errorf("Lease %v: ClaimTimeout = %v, want %v", tc.lease, got, tc.want)
		}
	}
}
