package worker_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/internal/limits"
	"github.com/txinbox/txinbox/worker"
)

// batchPool is the one place the batch handler tests create pools: on db (nil: the test's pool), with
// the settings of env.pool.
func batchPool(t *testing.T, e *env, db txinbox.DB, hs *worker.Handlers, mod func(*worker.Config)) *worker.Pool {
	t.Helper()
	if db == nil {
		db = e.Pool
	}
	return batchPoolOn(t, txinbox.Store{DB: db, Schema: e.Schema, Tracer: e.tracer}, hs, mod)
}

// batchPoolOn is batchPool on store.
func batchPoolOn(t *testing.T, store txinbox.Store, hs *worker.Handlers, mod func(*worker.Config)) *worker.Pool {
	t.Helper()
	cfg := worker.Config{Consumer: "ledger", Handlers: hs, PollInterval: 20 * time.Millisecond,
		Backoff: txinbox.BackoffFunc(func(int) time.Duration { return 10 * time.Millisecond })}
	if mod != nil {
		mod(&cfg)
	}
	p, err := worker.New(store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// applyCredits is applyCredit for a batch handler: one statement for the whole set.
func applyCredits(ctx context.Context, tx pgx.Tx, schema string, msgs []*worker.Message[credit]) error {
	keys, amounts := make([]string, len(msgs)), make([]int64, len(msgs))
	for i, m := range msgs {
		keys[i], amounts[i] = m.Key, m.Payload.Amount
	}
	_, err := tx.Exec(ctx, "INSERT INTO "+pgx.Identifier{schema, "effects"}.Sanitize()+
		" (key, amount) SELECT * FROM unnest($1::text[], $2::bigint[])", keys, amounts)
	return err
}

// batchBound is the most handler calls the pool may make for k failing messages among n.
func batchBound(k, n int) int { return k*(int(math.Ceil(math.Log2(float64(n))))+2) + 1 }

func hasKey(msgs []*worker.Message[credit], key string) bool {
	return slices.ContainsFunc(msgs, func(m *worker.Message[credit]) bool { return m.Key == key })
}

// Poison messages among 200 handed to one batch handler: the others complete once, in the first
// attempt, never charged; each poison is retried alone, then dead; the effects are exactly the good
// messages'; the first attempt's calls stay within the bisection bound; SetResult works per message.
func TestBatchHandlerIsolatesPoisonByBisection(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		poison []string
	}{
		{"one in the middle", []string{"p-100"}},
		{"the last", []string{"p-199"}}, // every left half succeeds: the right ones are never called whole
		{"three", []string{"p-3", "p-101", "p-177"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const n = 200
			e := newEnv(t)
			e.receive(t, keys("p", n)...) // all queued before the pool starts: one claim of 200
			var mu sync.Mutex
			var firstCalls, calls int
			hs := worker.NewHandlers()
			worker.HandleBatch(hs, "credit", func(ctx context.Context, tx pgx.Tx, msgs []*worker.Message[credit]) error {
				mu.Lock()
				calls++
				if msgs[0].Attempt == 1 {
					firstCalls++
				}
				mu.Unlock()
				if err := applyCredits(ctx, tx, e.Schema, msgs); err != nil {
					return err
				}
				for _, m := range msgs {
					if slices.Contains(tc.poison, m.Key) {
						return fmt.Errorf("poison %s", m.Key) // after writing: the call's writes roll back
					}
					if err := m.SetResult(map[string]string{"key": m.Key}); err != nil {
						return err
					}
				}
				return nil
			}, worker.HandlerConfig{MaxAttempts: 3})
			run(t, batchPool(t, e, nil, hs, func(c *worker.Config) { c.Concurrency = 1 }))
			waitFor(t, "all settled", func() bool { return e.count(t, "completed")+e.count(t, "dead") == n })

			for _, k := range tc.poison {
				if s, started, failed, lastErr := e.state(t, k); s != "dead" || started != 3 || failed != 3 || !strings.Contains(lastErr, "poison "+k) {
					t.Errorf("%s: %s, %d started, %d failed, %q; want dead after 3 failed attempts", k, s, started, failed, lastErr)
				}
			}
			if got := e.count(t, "completed"); got != int64(n-len(tc.poison)) {
				t.Fatalf("completed = %d, want %d", got, n-len(tc.poison))
			}
			if got := e.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE state = 'completed' AND (attempts_started, attempts_failed) <> (1, 0)`); got != 0 {
				t.Fatalf("%d good messages were charged an attempt or a failure", got)
			}
			if got := e.Count(t, `SELECT count(*) FROM {schema}.effects`); got != int64(n-len(tc.poison)) {
				t.Fatalf("effects = %d, want %d", got, n-len(tc.poison))
			}
			if got := e.Count(t, `SELECT count(*) FROM {schema}.effects WHERE key = ANY($1)`, tc.poison); got != 0 {
				t.Fatalf("%d poison effects kept", got)
			}
			if got := e.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE state = 'completed' AND result->>'key' = key`); got != int64(n-len(tc.poison)) {
				t.Fatalf("%d results stored, want one per completed message", got)
			}
			mu.Lock()
			defer mu.Unlock()
			if bound := batchBound(len(tc.poison), n); firstCalls > bound {
				t.Fatalf("first attempt: %d handler calls for %d poison among %d, bound %d", firstCalls, len(tc.poison), n, bound)
			}
			// The two later attempts run only the poison messages (together if claimed together).
			if want := firstCalls + 2*batchBound(len(tc.poison), len(tc.poison)); calls > want {
				t.Fatalf("%d handler calls, want at most %d", calls, want)
			}
			t.Logf("%d calls in the first attempt (bound %d)", firstCalls, batchBound(len(tc.poison), n))
		})
	}
}

// A handler that names its failing messages (BatchErrors) skips the bisection: one failed call, one
// call with the rest; a Permanent error in it makes the message dead at once.
func TestBatchHandlerBatchErrorsSkipBisection(t *testing.T) {
	t.Parallel()
	const n = 50
	e := newEnv(t)
	e.receive(t, keys("b", n)...)
	var calls atomic.Int64
	hs := worker.NewHandlers()
	worker.HandleBatch(hs, "credit", func(ctx context.Context, tx pgx.Tx, msgs []*worker.Message[credit]) error {
		calls.Add(1)
		if err := applyCredits(ctx, tx, e.Schema, msgs); err != nil {
			return err
		}
		failed := worker.BatchErrors{}
		for _, m := range msgs {
			switch m.Key {
			case "b-7":
				failed[m.ID] = txinbox.Permanent(errors.New("rejected"))
			case "b-30":
				failed[m.ID] = errors.New("try later")
			}
		}
		if len(failed) > 0 {
			return failed
		}
		return nil
	}, worker.HandlerConfig{MaxAttempts: 2})
	run(t, batchPool(t, e, nil, hs, func(c *worker.Config) { c.Concurrency = 1 }))
	waitFor(t, "all settled", func() bool { return e.count(t, "completed")+e.count(t, "dead") == n })
	if s, started, _, lastErr := e.state(t, "b-7"); s != "dead" || started != 1 || !strings.Contains(lastErr, "rejected") {
		t.Fatalf("b-7: %s after %d attempts (%q), want dead at once", s, started, lastErr)
	}
	if s, started, _, lastErr := e.state(t, "b-30"); s != "dead" || started != 2 || !strings.Contains(lastErr, "try later") {
		t.Fatalf("b-30: %s after %d attempts (%q), want dead after 2", s, started, lastErr)
	}
	if got := e.Count(t, `SELECT count(*) FROM {schema}.effects`); got != n-2 {
		t.Fatalf("effects = %d, want %d", got, n-2)
	}
	// First attempt: the failed call and the call with the other 48; then b-30 alone.
	if got := calls.Load(); got != 3 {
		t.Fatalf("handler calls = %d, want 3 (no bisection)", got)
	}
}

// A payload that does not decode is dead at once and never reaches the handler; a panic and a timeout
// in a call are isolated to their message, which fails as with a single handler; the others complete.
func TestBatchHandlerDecodePanicTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	msgs := []inbox.Message{}
	for _, k := range keys("ok", 10) {
		msgs = append(msgs, inbox.Message{Consumer: "ledger", Key: k, Kind: "credit", Payload: []byte(`{"amount": 1}`)})
	}
	for _, k := range []string{"panic", "slow"} {
		msgs = append(msgs, inbox.Message{Consumer: "ledger", Key: k, Kind: "credit", Payload: []byte(`{"amount": 1}`)})
	}
	msgs = append(msgs, inbox.Message{Consumer: "ledger", Key: "undecodable", Kind: "credit", Payload: []byte(`{"amount": "x"}`)})
	rand.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
	if _, err := e.client.ReceiveMany(context.Background(), msgs); err != nil {
		t.Fatal(err)
	}
	var sawUndecodable atomic.Bool
	hs := worker.NewHandlers()
	worker.HandleBatch(hs, "credit", func(ctx context.Context, tx pgx.Tx, msgs []*worker.Message[credit]) error {
		if err := applyCredits(ctx, tx, e.Schema, msgs); err != nil {
			return err
		}
		switch {
		case hasKey(msgs, "undecodable"):
			sawUndecodable.Store(true)
		case hasKey(msgs, "panic"):
			panic("boom")
		case hasKey(msgs, "slow"):
			<-ctx.Done() // until the call's timeout
			return ctx.Err()
		}
		return nil
	}, worker.HandlerConfig{MaxAttempts: 1, Timeout: 300 * time.Millisecond})
	run(t, batchPool(t, e, nil, hs, func(c *worker.Config) { c.Concurrency = 1; c.Lease = 10 * time.Second }))
	waitFor(t, "all settled", func() bool { return e.count(t, "completed")+e.count(t, "dead") == int64(len(msgs)) })
	if sawUndecodable.Load() {
		t.Fatal("the undecodable message reached the handler")
	}
	for key, want := range map[string]string{"undecodable": "does not decode", "panic": "panic: boom", "slow": "timed out"} {
		if s, started, _, lastErr := e.state(t, key); s != "dead" || started != 1 || !strings.Contains(lastErr, want) {
			t.Errorf("%s: %s after %d attempts, error %q; want dead, %q", key, s, started, lastErr, want)
		}
	}
	if got := e.count(t, "completed"); got != 10 {
		t.Fatalf("completed = %d, want 10", got)
	}
	if got := e.Count(t, `SELECT count(*) FROM {schema}.effects`); got != 10 {
		t.Fatalf("effects = %d, want 10", got)
	}
}

// A batch handler that writes through every way a pgx.Tx offers (Exec, Query, QueryRow, SendBatch,
// CopyFrom, Prepare, Conn(), a nested Begin committed, a large object) and then fails: nothing it
// wrote survives, in any of its calls.
func TestBatchHandlerWritesEveryWayThenFails(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if _, err := e.Pool.Exec(context.Background(), e.SQL(`CREATE TABLE {schema}.writes (key text NOT NULL, how text NOT NULL)`)); err != nil {
		t.Fatal(err)
	}
	e.receive(t, keys("w", 6)...)
	table := pgx.Identifier{e.Schema, "writes"}.Sanitize()
	ins := "INSERT INTO " + table + " (key, how) VALUES ($1, $2)"
	var calls atomic.Int64
	hs := worker.NewHandlers()
	worker.HandleBatch(hs, "credit", func(ctx context.Context, tx pgx.Tx, msgs []*worker.Message[credit]) error {
		calls.Add(1)
		k := msgs[0].Key
		if _, err := tx.Exec(ctx, ins, k, "exec"); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, ins+" RETURNING key", k, "query")
		if err != nil {
			return err
		}
		rows.Close()
		var got string
		if err := tx.QueryRow(ctx, ins+" RETURNING key", k, "queryrow").Scan(&got); err != nil {
			return err
		}
		b := &pgx.Batch{}
		b.Queue(ins, k, "sendbatch")
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{e.Schema, "writes"}, []string{"key", "how"}, pgx.CopyFromRows([][]any{{k, "copy"}})); err != nil {
			return err
		}
		if _, err := tx.Prepare(ctx, "", ins); err != nil {
			return err
		}
		if _, err := tx.Conn().Exec(ctx, ins, k, "conn"); err != nil {
			return err
		}
		nested, err := tx.Begin(ctx)
		if err != nil {
			return err
		}
		if _, err := nested.Exec(ctx, ins, k, "nested"); err != nil {
			return err
		}
		if err := nested.Commit(ctx); err != nil {
			return err
		}
		lo := tx.LargeObjects()
		if _, err := lo.Create(ctx, 0); err != nil {
			return err
		}
		return errors.New("fails after writing")
	}, worker.HandlerConfig{MaxAttempts: 1})
	var before int64
	if err := e.Pool.QueryRow(context.Background(), "SELECT count(*) FROM pg_largeobject_metadata").Scan(&before); err != nil {
		t.Fatal(err)
	}
	run(t, batchPool(t, e, nil, hs, func(c *worker.Config) { c.Concurrency = 1 }))
	waitFor(t, "all dead", func() bool { return e.count(t, "dead") == 6 })
	if got := e.Count(t, `SELECT count(*) FROM {schema}.writes`); got != 0 {
		t.Fatalf("%d writes survived the failed calls", got)
	}
	if got := calls.Load(); got < 7 {
		t.Fatalf("handler calls = %d, want the bisection down to single messages", got)
	}
	// Large objects are database-wide: other tests' may come and go, so only a gross leak is detected
	// here; the rows above are the exact check.
	var after int64
	if err := e.Pool.QueryRow(context.Background(), "SELECT count(*) FROM pg_largeobject_metadata").Scan(&after); err != nil {
		t.Fatal(err)
	}
	if after-before >= calls.Load() {
		t.Fatalf("large objects: %d before, %d after %d failed calls", before, after, calls.Load())
	}
}

// batchHangHandlers is the crash child's batch handler (mode "batch-hang"): it writes the effects of
// every message of the call, and blocks in the call holding the key target.
func batchHangHandlers(schema, target, marker string) *worker.Handlers {
	hs := worker.NewHandlers()
	worker.HandleBatch(hs, "credit", func(ctx context.Context, tx pgx.Tx, msgs []*worker.Message[credit]) error {
		if err := applyCredits(ctx, tx, schema, msgs); err != nil {
			return err
		}
		if hasKey(msgs, target) {
			_ = os.WriteFile(marker, []byte("x"), 0o600)
			select {} // the parent kills us here, effects written but not committed
		}
		return nil
	}, worker.HandlerConfig{MaxAttempts: 3})
	return hs
}

// A worker SIGKILLed inside a batch handler call, its effects written: nothing of the call is applied;
// after the lease, a new worker applies every message exactly once.
func TestBatchHandlerSIGKILLMidCallThenRecovery(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.receive(t, keys("m", 40)...)
	marker := filepath.Join(t.TempDir(), "hung")
	cmd := startChild(t, e, "batch-hang", "m-25", marker)
	waitFor(t, "the child to reach m-25", func() bool { _, err := os.Stat(marker); return err == nil })
	if n := e.Count(t, `SELECT count(*) FROM {schema}.effects`); n != 0 {
		t.Fatalf("effects visible before the commit: %d", n)
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if n := e.Count(t, `SELECT count(*) FROM {schema}.effects`); n != 0 {
		t.Fatalf("effects of the killed call applied: %d", n)
	}
	var calls atomic.Int64
	hs := worker.NewHandlers()
	worker.HandleBatch(hs, "credit", func(ctx context.Context, tx pgx.Tx, msgs []*worker.Message[credit]) error {
		calls.Add(1)
		return applyCredits(ctx, tx, e.Schema, msgs)
	})
	run(t, batchPool(t, e, nil, hs, func(c *worker.Config) { c.Lease = 2 * time.Second; c.Timeout = time.Second }))
	waitFor(t, "all completed", func() bool { return e.count(t, "completed") == 40 })
	if n := e.Count(t, `SELECT count(*) FROM {schema}.effects`); n != 40 {
		t.Fatalf("effects = %d, want 40", n)
	}
	if n := e.Count(t, `SELECT count(*) FROM {schema}.effects WHERE key = 'm-25'`); n != 1 {
		t.Fatalf("m-25 effects = %d", n)
	}
}

// A batch handler call that ends the batch transaction itself: if that transaction committed, the
// messages of the call are dead at once (their effects are durable, running them again would repeat
// them) and never run again; if it rolled back, they are run again alone, and only the one whose
// handler ends it is dead.
func TestBatchHandlerEndingTheBatchTransaction(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		end       func(ctx context.Context, tx pgx.Tx) error
		committed bool
	}{
		{"COMMIT statement", func(ctx context.Context, tx pgx.Tx) error { _, err := tx.Exec(ctx, "COMMIT"); return err }, true},
		{"ROLLBACK through Conn", func(ctx context.Context, tx pgx.Tx) error { _, err := tx.Conn().Exec(ctx, "ROLLBACK"); return err }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.receive(t, "a-1", "b-ender", "c-1") // one call
			var mu sync.Mutex
			calls := map[string]int{}
			hs := worker.NewHandlers()
			worker.HandleBatch(hs, "credit", func(ctx context.Context, tx pgx.Tx, msgs []*worker.Message[credit]) error {
				mu.Lock()
				for _, m := range msgs {
					calls[m.Key]++
				}
				mu.Unlock()
				if err := applyCredits(ctx, tx, e.Schema, msgs); err != nil {
					return err
				}
				if hasKey(msgs, "b-ender") {
					return tc.end(ctx, tx)
				}
				return nil
			})
			run(t, batchPool(t, e, nil, hs, func(c *worker.Config) {
				c.Concurrency = 1
				c.Lease = 2 * time.Second
				c.Timeout = time.Second
			}))
			waitFor(t, "all finished", func() bool { return e.count(t, "completed")+e.count(t, "dead") == 3 })
			wantState := map[string]string{"a-1": "completed", "b-ender": "dead", "c-1": "completed"}
			wantEffects := map[string]int64{"a-1": 1, "b-ender": 0, "c-1": 1}
			wantCalls := map[string]int{"a-1": 2, "b-ender": 2, "c-1": 2}
			if tc.committed {
				wantState = map[string]string{"a-1": "dead", "b-ender": "dead", "c-1": "dead"}
				wantEffects = map[string]int64{"a-1": 1, "b-ender": 1, "c-1": 1}
				wantCalls = map[string]int{"a-1": 1, "b-ender": 1, "c-1": 1}
			}
			for k, want := range wantState {
				s, _, _, lastErr := e.state(t, k)
				if s != want {
					t.Errorf("%s: %s (%q), want %s", k, s, lastErr, want)
				}
				if s == "dead" && !strings.Contains(lastErr, "ended the batch transaction itself") {
					t.Errorf("%s: error %q", k, lastErr)
				}
				if n := e.Count(t, `SELECT count(*) FROM {schema}.effects WHERE key = $1`, k); n != wantEffects[k] {
					t.Errorf("effects of %s = %d, want %d", k, n, wantEffects[k])
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if !maps.Equal(calls, wantCalls) {
				t.Errorf("handler calls per message = %v, want %v", calls, wantCalls)
			}
		})
	}
}

// A pool with both kinds claims for its batch handler (up to HandlerConfig.BatchSize) and runs the
// single handlers' messages beyond Config.BatchSize in further transactions of at most BatchSize:
// every message completes once, and no transaction runs more single messages than BatchSize.
func TestBatchHandlerMixedClaimBoundsSingles(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var msgs []inbox.Message
	for i := range 30 {
		msgs = append(msgs,
			inbox.Message{Consumer: "ledger", Key: fmt.Sprint("single-", i), Kind: "credit", Payload: []byte(`{"amount": 1}`)},
			inbox.Message{Consumer: "ledger", Key: fmt.Sprint("batch-", i), Kind: "credit-batch", Payload: []byte(`{"amount": 1}`)})
	}
	if _, err := e.client.ReceiveMany(context.Background(), msgs); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	perTx := map[int64]int{}
	var batchCalls []int
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		var xid int64
		if err := tx.QueryRow(ctx, "SELECT txid_current()").Scan(&xid); err != nil {
			return err
		}
		mu.Lock()
		perTx[xid]++
		mu.Unlock()
		return applyCredit(ctx, tx, e.Schema, m)
	})
	worker.HandleBatch(hs, "credit-batch", func(ctx context.Context, tx pgx.Tx, msgs []*worker.Message[credit]) error {
		mu.Lock()
		batchCalls = append(batchCalls, len(msgs))
		mu.Unlock()
		return applyCredits(ctx, tx, e.Schema, msgs)
	}, worker.HandlerConfig{BatchSize: 100})
	run(t, batchPool(t, e, nil, hs, func(c *worker.Config) { c.Concurrency = 1; c.BatchSize = 5 }))
	waitFor(t, "all completed", func() bool { return e.count(t, "completed") == 60 })
	if n := e.Count(t, `SELECT count(*) FROM {schema}.effects`); n != 60 {
		t.Fatalf("effects = %d, want 60", n)
	}
	mu.Lock()
	defer mu.Unlock()
	for xid, n := range perTx {
		if n > 5 {
			t.Fatalf("transaction %d ran %d single messages, more than BatchSize 5", xid, n)
		}
	}
	if !slices.Equal(batchCalls, []int{30}) {
		t.Fatalf("batch handler calls of %v messages, want one call of 30 (one claim)", batchCalls)
	}
}

// 4 pools with batch handlers, 50,000 messages each delivered 3 times in shuffled order while the
// pools run: exactly 50,000 effects, nothing left pending or processing.
func TestBatchHandlerConcurrentPoolsExactlyOnce(t *testing.T) {
	t.Parallel()
	const unique, copies = 50000, 3
	e := newEnv(t)
	deliveries := make([]string, 0, unique*copies)
	for i := range unique {
		for range copies {
			deliveries = append(deliveries, fmt.Sprintf("evt-%d", i))
		}
	}
	rand.Shuffle(len(deliveries), func(i, j int) { deliveries[i], deliveries[j] = deliveries[j], deliveries[i] })
	var handled atomic.Int64
	for i := range 4 {
		cfg, _ := pgxpool.ParseConfig(e.URL)
		cfg.MaxConns = 6
		db, err := pgxpool.NewWithConfig(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(db.Close)
		hs := worker.NewHandlers()
		worker.HandleBatch(hs, "credit", func(ctx context.Context, tx pgx.Tx, msgs []*worker.Message[credit]) error {
			handled.Add(int64(len(msgs)))
			return applyCredits(ctx, tx, e.Schema, msgs)
		})
		run(t, batchPool(t, e, db, hs, func(c *worker.Config) {
			c.Concurrency = 4
			c.PollInterval = 10 * time.Millisecond
			c.Owner = fmt.Sprintf("pool-%d", i)
		}))
	}
	if inserted := e.deliver(t, deliveries, 200); inserted != unique {
		t.Fatalf("inserted %d, want %d", inserted, unique)
	}
	e.waitProgress(t, "drain", func() int64 { return e.count(t, "completed") }, unique)
	if n := e.Count(t, `SELECT count(*) FROM {schema}.effects`); n != unique {
		t.Fatalf("effects = %d, want %d", n, unique)
	}
	if n := e.Count(t, `SELECT count(*) FROM `+msgView+` m WHERE state IN ('pending', 'processing')`); n != 0 {
		t.Fatalf("%d messages left pending or processing", n)
	}
	if handled.Load() != unique {
		t.Fatalf("messages handed to handlers = %d, want %d (no failures expected)", handled.Load(), unique)
	}
}

// HandleBatch and Handle check HandlerConfig.BatchSize at registration.
func TestHandleBatchChecksBatchSize(t *testing.T) {
	t.Parallel()
	fn := func(context.Context, pgx.Tx, []*worker.Message[credit]) error { return nil }
	for _, tc := range []struct {
		name string
		reg  func(hs *worker.Handlers)
		want string
	}{
		{"negative", func(hs *worker.Handlers) { worker.HandleBatch(hs, "k", fn, worker.HandlerConfig{BatchSize: -1}) }, "BatchSize"},
		{"too large", func(hs *worker.Handlers) {
			worker.HandleBatch(hs, "k", fn, worker.HandlerConfig{BatchSize: limits.HandlerBatchSize + 1})
		}, "BatchSize"},
		{"single handler", func(hs *worker.Handlers) {
			worker.Handle(hs, "k", func(context.Context, pgx.Tx, *worker.Message[credit]) error { return nil }, worker.HandlerConfig{BatchSize: 10})
		}, "batch handlers"},
		{"twice", func(hs *worker.Handlers) {
			worker.HandleBatch(hs, "k", fn)
			worker.Handle(hs, "k", func(context.Context, pgx.Tx, *worker.Message[credit]) error { return nil })
		}, "twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				v := recover()
				if s, _ := v.(string); !strings.Contains(s, tc.want) {
					t.Fatalf("panic %v, want one mentioning %q", v, tc.want)
				}
			}()
			tc.reg(worker.NewHandlers())
		})
	}
}
