package retention_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/internal/limits"
	"github.com/txinbox/txinbox/retention"
	"github.com/txinbox/txinbox/txinboxtest/ledgertest"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

func TestCleanDeletesInBatchesWhileWorkGoesOn(t *testing.T) {
	t.Parallel()
	c, db := newClient(t)
	ctx := context.Background()
	old := ledgertest.Receive(t, c, ledgertest.Keys("old", 300)...)
	ledgertest.Complete(t, db, -time.Hour, old[:250]...)
	ledgertest.Complete(t, db, time.Hour, old[250:]...)
	ledgertest.StartWorker(t, db, nil)

	// Receiving and processing go on while the cleaner runs.
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range 20 {
			ms := make([]inbox.Message, 10)
			for j := range ms {
				ms[j] = ledgertest.Message(fmt.Sprintf("new-%d-%d", i, j), `{"amount":2}`)
			}
			if _, err := c.ReceiveMany(ctx, ms); err != nil {
				errs <- err
				return
			}
		}
	}()

	r, err := retention.Clean(ctx, db.Store(), retention.CleanOptions{BatchSize: 40, MaxBatches: 2})
	if err != nil || r.Deleted != 80 || r.Batches != 2 || r.Done {
		t.Fatalf("bounded pass: %+v, %v; want 80 deleted in 2 batches, not done", r, err)
	}
	r, err = retention.Clean(ctx, db.Store(), retention.CleanOptions{BatchSize: 40})
	if err != nil || r.Deleted != 170 || !r.Done {
		t.Fatalf("full pass: %+v, %v; want the 170 other expired rows", r, err)
	}
	if r.Batches < 5 { // 170 rows in batches of 40
		t.Errorf("batches = %d, want at least 5", r.Batches)
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatalf("receiving during cleaning: %v", err)
	}
	ledgertest.WaitFor(t, "the new messages to complete", func() bool {
		return db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE key LIKE 'new-%' AND state = 'completed'`) == 200
	})
	if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE key LIKE 'old-%'`); got != 50 {
		t.Fatalf("old rows left = %d, want the 50 within their window", got)
	}
	if got := db.Count(t, `SELECT count(*) FROM {schema}.counts`); got != 200 {
		t.Fatalf("handled = %d, want 200", got)
	}
	// Completed rows within their window are never cleaned.
	if r, err := retention.Clean(ctx, db.Store(), retention.CleanOptions{}); err != nil || r.Deleted != 0 || !r.Done {
		t.Fatalf("clean pass: %+v, %v", r, err)
	}
}

func TestExpiredKeyIsAcceptedAgain(t *testing.T) {
	t.Parallel()
	c, db := newClient(t)
	ctx := context.Background()
	id := ledgertest.Receive(t, c, "k")[0]
	ledgertest.Complete(t, db, time.Hour, id)
	if r, err := c.Receive(ctx, ledgertest.Message("k", `{"amount":1}`)); err != nil || r.Outcome != inbox.Duplicate || r.State != inbox.StateCompleted {
		t.Fatalf("within the window: %+v, %v; want a duplicate", r, err)
	}

	// Expired but not cleaned yet: the row is reused, even for another payload.
	ledgertest.Complete(t, db, -time.Second, id)
	r, err := c.Receive(ctx, ledgertest.Message("k", `{"amount":5}`))
	if err != nil || r.Outcome != inbox.Inserted || r.ID != id || r.State != inbox.StatePending {
		t.Fatalf("expired key: %+v, %v; want it inserted again in row %d", r, err, id)
	}
	if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox_queue WHERE id = $1`, id); got != 1 {
		t.Fatalf("renewed message not queued")
	}

	// Expired and cleaned: a new row.
	ledgertest.Complete(t, db, -time.Second, id)
	if res, err := retention.Clean(ctx, db.Store(), retention.CleanOptions{}); err != nil || res.Deleted != 1 {
		t.Fatalf("clean: %+v, %v", res, err)
	}
	r, err = c.Receive(ctx, ledgertest.Message("k", `{"amount":1}`))
	if err != nil || r.Outcome != inbox.Inserted || r.ID == id {
		t.Fatalf("cleaned key: %+v, %v; want a new message", r, err)
	}
}

func TestExpiredKeyIsProcessedAgain(t *testing.T) {
	t.Parallel()
	c, db := newClient(t)
	ctx := context.Background()
	ledgertest.StartWorker(t, db, nil)
	runs := func() int64 { return db.Count(t, `SELECT coalesce(sum(runs), 0) FROM {schema}.counts WHERE key = 'k'`) }
	ledgertest.Receive(t, c, "k")
	ledgertest.WaitFor(t, "the first run", func() bool { return runs() == 1 })
	ledgertest.WaitFor(t, "completion", func() bool {
		return db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE key = 'k' AND state = 'completed'`) == 1
	})
	if r, err := c.Receive(ctx, ledgertest.Message("k", `{"amount":1}`)); err != nil || r.Outcome != inbox.Duplicate {
		t.Fatalf("duplicate within the window: %+v, %v", r, err)
	}
	// End the window (as if Retention had passed).
	if _, err := db.Pool.Exec(ctx, db.SQL(`UPDATE {schema}.inbox SET expires_at = now() - interval '1 second' WHERE key = 'k'`)); err != nil {
		t.Fatal(err)
	}
	if r, err := c.Receive(ctx, ledgertest.Message("k", `{"amount":1}`)); err != nil || r.Outcome != inbox.Inserted {
		t.Fatalf("after the window: %+v, %v", r, err)
	}
	// Workers fence claims by comparing the queue row's token with the message's: a renewed message
	// whose queue row starts below the message's token is never run. (A worker may already have
	// claimed it, which moves the queue row's token on: since 00004 the inbox row gets the claim's
	// token at the finish, so the queue row's token is never below the message's.)
	if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox m JOIN {schema}.inbox_queue q USING (id, consumer)
		WHERE m.key = 'k' AND q.token < m.token`); got != 0 {
		t.Fatal("RenewExpired queued the renewed message with token 0 instead of the message's token: " +
			"workers will skip it forever (fix in queries/receive.sql)")
	}
	ledgertest.WaitFor(t, "the second run", func() bool { return runs() == 2 })
}

// TestCleanerDeletesExpiredIdempotencyKeys: Clean and DeleteExpiredKeys delete the expired keys of
// package idempotency, BatchSize (1000 for DeleteExpiredKeys) per statement, and leave the others.
// (Was idempotency's TestCleanup, of the removed Middleware.Cleanup.)
func TestCleanerDeletesExpiredIdempotencyKeys(t *testing.T) {
	t.Parallel()
	_, db := newClient(t)
	ctx := context.Background()
	for i := range 7 {
		expires := "now() - interval '1 minute'"
		if i < 2 {
			expires = "now() + interval '1 hour'"
		}
		mustExec(t, db, fmt.Sprintf(`INSERT INTO {schema}.idempotency_keys (principal, method, route, key, fingerprint,
			state, status, locked_until, expires_at) VALUES ('alice', 'POST', '/transfers', 'k%d', '\x00', 'completed', 201, now(), %s)`, i, expires))
	}
	r, err := retention.Clean(ctx, db.Store(), retention.CleanOptions{BatchSize: 2})
	if err != nil || r.KeysDeleted != 5 {
		t.Fatalf("clean: %+v %v", r, err)
	}
	if left := db.Count(t, `SELECT count(*) FROM {schema}.idempotency_keys`); left != 2 {
		t.Fatalf("%d keys left", left)
	}
	if r, err := retention.Clean(ctx, db.Store(), retention.CleanOptions{}); err != nil || r.KeysDeleted != 0 {
		t.Fatalf("second clean: %+v %v", r, err)
	}
	mustExec(t, db, `UPDATE {schema}.idempotency_keys SET expires_at = now() - interval '1 minute'`)
	if n, err := retention.DeleteExpiredKeys(ctx, db.Store()); err != nil || n != 2 {
		t.Fatalf("DeleteExpiredKeys: %d %v", n, err)
	}
}

// Bad options are a *txinbox.ArgumentError naming the option; an invalid Store a
// *txinbox.ConfigError. Nothing is changed.
func TestOptionErrors(t *testing.T) {
	t.Parallel()
	_, db := newClient(t)
	ctx := context.Background()
	for name, o := range map[string]retention.CleanOptions{
		"BatchSize":  {BatchSize: -1},
		"MaxBatches": {MaxBatches: -1},
	} {
		var ae *txinbox.ArgumentError
		if _, err := retention.Clean(ctx, db.Store(), o); !errors.As(err, &ae) || ae.Name != name || !errors.Is(err, txinbox.ErrInvalidArgument) {
			t.Errorf("Clean %+v: err = %v, want a *txinbox.ArgumentError for %s", o, err, name)
		}
	}
	if _, err := retention.Clean(ctx, db.Store(), retention.CleanOptions{BatchSize: limits.CleanBatchSize + 1}); !errors.Is(err, txinbox.ErrInvalidArgument) {
		t.Errorf("Clean above MaxCleanBatchSize: err = %v, want ErrInvalidArgument", err)
	}
	for name, o := range map[string]retention.RotateOptions{
		"Generation":  {Generation: time.Millisecond},
		"LockTimeout": {LockTimeout: time.Microsecond},
	} {
		var ae *txinbox.ArgumentError
		if _, err := retention.Rotate(ctx, db.Store(), o); !errors.As(err, &ae) || ae.Name != name || !errors.Is(err, txinbox.ErrInvalidArgument) {
			t.Errorf("Rotate %+v: err = %v, want a *txinbox.ArgumentError for %s", o, err, name)
		}
	}
	if got := db.Count(t, `SELECT gen FROM {schema}.inbox_ring`); got != 0 {
		t.Errorf("generation %d after refused rotations, want 0", got)
	}
	var ce *txinbox.ConfigError
	if _, err := retention.Rotate(ctx, txinbox.Store{}, retention.RotateOptions{}); !errors.As(err, &ce) || ce.Field != "Store.DB" {
		t.Errorf("Rotate without a DB: err = %v, want a *txinbox.ConfigError for Store.DB", err)
	}
	if _, err := retention.DeleteExpiredKeys(ctx, txinbox.Store{}); !errors.As(err, &ce) || ce.Field != "Store.DB" {
		t.Errorf("DeleteExpiredKeys without a DB: err = %v, want a *txinbox.ConfigError for Store.DB", err)
	}
	bad := txinbox.Store{DB: db.Pool, Schema: `x"; DROP SCHEMA public; --`}
	for name, err := range map[string]error{
		"Rotate":            func() error { _, err := retention.Rotate(ctx, bad, retention.RotateOptions{Force: true}); return err }(),
		"Clean":             func() error { _, err := retention.Clean(ctx, bad, retention.CleanOptions{}); return err }(),
		"DeleteExpiredKeys": func() error { _, err := retention.DeleteExpiredKeys(ctx, bad); return err }(),
	} {
		if !errors.As(err, &ce) || ce.Field != "Store.Schema" {
			t.Errorf("%s on a bad schema name: err = %v, want a *txinbox.ConfigError for Store.Schema", name, err)
		}
	}
}

// Rotate rotates only once the current generation is opts.Generation old (default: the Store's
// Retention); Force rotates now.
func TestRotateWhenDue(t *testing.T) {
	t.Parallel()
	_, db := newClient(t)
	ctx := context.Background()
	store := db.Store()
	if r, err := retention.Rotate(ctx, store, retention.RotateOptions{}); err != nil || r.Rotated {
		t.Fatalf("a fresh generation rotated: %+v %v", r, err)
	}
	mustExec(t, db, `UPDATE {schema}.inbox_ring SET rotated_at = now() - interval '2 hours'`)
	if r, err := retention.Rotate(ctx, store, retention.RotateOptions{}); err != nil || r.Rotated {
		t.Fatalf("a generation 2 hours old rotated with the 7-day default: %+v %v", r, err)
	}
	if r, err := retention.Rotate(ctx, store, retention.RotateOptions{Generation: time.Hour}); err != nil || !r.Rotated || r.Generation != 1 {
		t.Fatalf("a generation 2 hours old, Generation 1h: %+v %v", r, err)
	}
	if r, err := retention.Rotate(ctx, store, retention.RotateOptions{Force: true}); err != nil || !r.Rotated || r.Generation != 2 {
		t.Fatalf("forced: %+v %v", r, err)
	}
}

// mustExec runs statements (their text may use {schema}), failing the test on an error.
func mustExec(t *testing.T, db *testdb.DB, stmts ...string) {
	t.Helper()
	for _, q := range stmts {
		if _, err := db.Pool.Exec(context.Background(), db.SQL(q)); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// Between every two delete statements of a cleaning pass, a message is received and processed by a
// worker pool: the pass holds nothing that receiving or processing waits for. A trigger gates each
// delete statement on an advisory lock the test releases step by step, and logs when each statement
// ran (database clock) and how many rows it deleted (never more than BatchSize).
func TestCleanBatchesInterleaveWithWork(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		pass func(st txinbox.Store) (retention.CleanResult, error)
	}{
		{"Clean", func(st txinbox.Store) (retention.CleanResult, error) {
			return retention.Clean(context.Background(), st, retention.CleanOptions{BatchSize: 40})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, db := newClient(t)
			ctx := context.Background()
			old := ledgertest.Receive(t, c, ledgertest.Keys("old", 300)...)
			ledgertest.Complete(t, db, -time.Hour, old[:250]...)
			ledgertest.Complete(t, db, time.Hour, old[250:]...)
			ledgertest.StartWorker(t, db, nil)

			gate := rand.Int32N(1<<30) + 1 // first key of the gate locks (two-int4 form), second: step
			mustExec(t, db, `CREATE SEQUENCE {schema}.clean_step`,
				`CREATE TABLE {schema}.clean_log (step int PRIMARY KEY, at timestamptz NOT NULL, rows bigint NOT NULL)`,
				fmt.Sprintf(`CREATE FUNCTION {schema}.clean_gate() RETURNS trigger LANGUAGE plpgsql AS $$
				BEGIN
					PERFORM pg_advisory_xact_lock(%d, nextval('{schema}.clean_step')::int);
					RETURN NULL;
				END $$`, gate),
				`CREATE FUNCTION {schema}.clean_logged() RETURNS trigger LANGUAGE plpgsql AS $$
				BEGIN
					INSERT INTO {schema}.clean_log (step, at, rows)
					VALUES (currval('{schema}.clean_step'), clock_timestamp(), (SELECT count(*) FROM gone));
					RETURN NULL;
				END $$`,
				`CREATE TRIGGER clean_gate BEFORE DELETE ON {schema}.inbox FOR EACH STATEMENT EXECUTE FUNCTION {schema}.clean_gate()`,
				`CREATE TRIGGER clean_logged AFTER DELETE ON {schema}.inbox REFERENCING OLD TABLE AS gone
					FOR EACH STATEMENT EXECUTE FUNCTION {schema}.clean_logged()`)
			gateConn, err := pgx.Connect(ctx, db.URL)
			if err != nil {
				t.Fatal(err)
			}
			defer gateConn.Close(ctx)
			const maxSteps = 100
			if _, err := gateConn.Exec(ctx, `SELECT pg_advisory_lock($1, s) FROM generate_series(1, $2) s`, gate, maxSteps); err != nil {
				t.Fatal(err)
			}

			type result struct {
				r   retention.CleanResult
				err error
			}
			done := make(chan result, 1)
			go func() {
				r, err := tc.pass(db.Store())
				done <- result{r, err}
			}()
			var res *result
			step := 1
			for ; step <= maxSteps; step++ {
				// Wait until delete statement `step` waits at the gate, or the pass ends.
				ledgertest.WaitFor(t, fmt.Sprintf("delete statement %d at the gate, or the end of the pass", step), func() bool {
					select {
					case r := <-done:
						res = &r
						return true
					default:
					}
					return db.Count(t, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
						AND classid::bigint = $1 AND objid::bigint = $2 AND objsubid = 2`, gate, step) == 1
				})
				if res != nil {
					break
				}
				// Statements 1 to step-1 are done, statement step has not run: receive and process.
				key := fmt.Sprintf("between-%d", step)
				if r, err := c.Receive(ctx, ledgertest.Message(key, `{"amount":1}`)); err != nil || r.Outcome != inbox.Inserted {
					t.Fatalf("receive %s mid-pass: %+v, %v", key, r, err)
				}
				if n := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE key = $1`, key); n != 1 {
					t.Fatalf("%s not stored", key)
				}
				ledgertest.WaitFor(t, key+" processed mid-pass", func() bool {
					return db.Count(t, `SELECT count(*) FROM {schema}.inbox m JOIN {schema}.counts c USING (key)
						WHERE m.key = $1 AND m.state = 'completed' AND c.runs = 1`, key) == 1
				})
				if _, err := gateConn.Exec(ctx, `SELECT pg_advisory_unlock($1, $2)`, gate, step); err != nil {
					t.Fatal(err)
				}
			}
			if res == nil {
				t.Fatalf("the pass ran more than %d statements", maxSteps)
			}
			if res.err != nil || res.r.Deleted != 250 || !res.r.Done || res.r.Batches != step-1 || res.r.Batches < 7 {
				t.Fatalf("pass: %+v, %v; want 250 deleted, done, in the %d statements gated (at least 7 of 40)", res.r, res.err, step-1)
			}

			// The log: one row per statement, at most BatchSize rows each, and each mid-pass message was
			// received after the statement before it and completed before the statement after it.
			if n := db.Count(t, `SELECT count(*) FROM {schema}.clean_log`); n != int64(res.r.Batches) {
				t.Fatalf("%d statements logged, want %d", n, res.r.Batches)
			}
			if n := db.Count(t, `SELECT count(*) FROM {schema}.clean_log WHERE rows > 40`); n != 0 {
				t.Fatalf("%d statements deleted more than BatchSize (40) rows", n)
			}
			if n := db.Count(t, `SELECT sum(rows) FROM {schema}.clean_log`); n != 250 {
				t.Fatalf("statements deleted %d rows, want 250", n)
			}
			if n := db.Count(t, `SELECT count(*) FROM {schema}.clean_log WHERE rows = 40`); n < 6 {
				t.Errorf("%d full batches of 40, want at least 6", n)
			}
			if n := db.Count(t, `SELECT count(*) FROM {schema}.inbox m
				LEFT JOIN {schema}.clean_log before ON before.step = substr(m.key, 9)::int - 1
				JOIN {schema}.clean_log after ON after.step = substr(m.key, 9)::int
				WHERE m.key LIKE 'between-%' AND m.received_at > coalesce(before.at, '-infinity')
				  AND m.completed_at > m.received_at AND m.completed_at < after.at`); n != int64(res.r.Batches) {
				t.Fatalf("%d of %d mid-pass messages were received and completed between their two statements", n, res.r.Batches)
			}
			if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE key LIKE 'old-%'`); got != 50 {
				t.Fatalf("old rows left = %d, want the 50 within their window", got)
			}
		})
	}
}

// fill inserts n completed messages directly, expired or not (a fast stand-in for received and
// processed ones).
func fill(b *testing.B, db *testdb.DB, n int, expired bool) {
	b.Helper()
	exp := "now() + interval '7 days'"
	if expired {
		exp = "now() - interval '1 second'"
	}
	_, err := db.Pool.Exec(context.Background(), db.SQL(`INSERT INTO {schema}.inbox
		(consumer, key, kind, payload, fingerprint, state, attempts_started, completed_at, expires_at)
		SELECT 'ledger', 'k-' || g || '-' || clock_timestamp(), 'OrderPaid', '{"amount":1}', '\x00', 'completed', 1, now(), `+exp+`
		FROM generate_series(1, $1) g`), n)
	if err != nil {
		b.Fatal(err)
	}
}

// BenchmarkCleanExpired measures deleting expired rows (default batches of 1000), per row.
func BenchmarkCleanExpired(b *testing.B) {
	db := testdb.New(b)
	_, err := inbox.New(db.Store(), inbox.Config{})
	if err != nil {
		b.Fatal(err)
	}
	fill(b, db, b.N, true)
	b.ResetTimer()
	r, err := retention.Clean(context.Background(), db.Store(), retention.CleanOptions{})
	if err != nil || r.Deleted != int64(b.N) {
		b.Fatalf("%+v, %v", r, err)
	}
	b.ReportMetric(float64(r.Batches), "batches")
}

// BenchmarkCleanPass measures a Clean that finds nothing to delete over 1M completed rows still in
// their window.
func BenchmarkCleanPass(b *testing.B) {
	db := testdb.New(b)
	_, err := inbox.New(db.Store(), inbox.Config{})
	if err != nil {
		b.Fatal(err)
	}
	fill(b, db, 1_000_000, false)
	if _, err := db.Pool.Exec(context.Background(), db.SQL(`VACUUM ANALYZE {schema}.inbox`)); err != nil {
		b.Fatal(err)
	}
	b.Run("full", func(b *testing.B) {
		for b.Loop() {
			if r, err := retention.Clean(context.Background(), db.Store(), retention.CleanOptions{}); err != nil || r.Deleted != 0 {
				b.Fatalf("%+v, %v", r, err)
			}
		}
	})
}
