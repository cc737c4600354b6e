package worker_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/worker"
)

// 4 pools x 8 goroutines, 20,000 messages each delivered 3 times in shuffled order while the pools
// run: exactly 20,000 effects, nothing left pending or processing.
func TestConcurrentPoolsExactlyOnce(t *testing.T) {
	t.Parallel()
	const unique, copies = 20000, 3
	e := newEnv(t)
	deliveries := make([]string, 0, unique*copies)
	for i := range unique {
		for range copies {
			deliveries = append(deliveries, fmt.Sprintf("evt-%d", i))
		}
	}
	rand.Shuffle(len(deliveries), func(i, j int) { deliveries[i], deliveries[j] = deliveries[j], deliveries[i] })

	var calls atomic.Int64
	for i := range 4 {
		cfg, _ := pgxpool.ParseConfig(e.URL)
		cfg.MaxConns = 6
		db, err := pgxpool.NewWithConfig(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(db.Close)
		hs := worker.NewHandlers()
		worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
			calls.Add(1)
			return applyCredit(ctx, tx, e.Schema, m)
		})
		p, err := worker.New(txinbox.Store{DB: db, Schema: e.Schema}, worker.Config{Consumer: "ledger", Handlers: hs,
			Concurrency: 8, PollInterval: 10 * time.Millisecond, Owner: fmt.Sprintf("pool-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		run(t, p)
	}

	// 8 producers deliver in batches of 100.
	if inserted := e.deliver(t, deliveries, 100); inserted != unique {
		t.Fatalf("inserted %d, want %d", inserted, unique)
	}
	waitFor(t, "drain", func() bool { return e.count(t, "completed") == unique })
	if n := e.Count(t, `SELECT count(*) FROM {schema}.effects`); n != unique {
		t.Fatalf("effects = %d, want %d", n, unique)
	}
	if n := e.Count(t, `SELECT count(*) FROM `+msgView+` m WHERE state IN ('pending', 'processing')`); n != 0 {
		t.Fatalf("%d messages left pending or processing", n)
	}
	if calls.Load() != unique {
		t.Fatalf("handler calls = %d, want %d (no retries expected)", calls.Load(), unique)
	}
}

// A worker frozen after its claim, past its lease, finds its batch taken over: the server ended its
// idle batch transaction at the lease, so nothing it does afterwards applies (its handler may still be
// called, on that ended transaction).
func TestFencedAfterLeaseTakeover(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.receive(t, "slow")
	hs := worker.NewHandlers()
	var applied sync.Map
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		applied.Store(m.Attempt, true)
		return applyCredit(ctx, tx, e.Schema, m)
	})
	lease := func(c *worker.Config) { c.Lease = 500 * time.Millisecond; c.Timeout = 200 * time.Millisecond }
	frozen := e.pool(t, hs, lease)
	release := make(chan struct{})
	var froze atomic.Bool
	worker.SetClaimHook(frozen, func(*worker.Pool, []string) {
		if froze.CompareAndSwap(false, true) {
			<-release // frozen past the lease, its batch transaction open and idle
		}
	})
	run(t, frozen)
	waitFor(t, "the first claim", froze.Load)

	other := e.pool(t, hs, lease)
	run(t, other)
	waitFor(t, "takeover", func() bool { return e.count(t, "completed") == 1 })
	close(release) // the frozen worker wakes up and tries to run its stale claim
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := frozen.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	if n := e.Count(t, `SELECT count(*) FROM {schema}.effects`); n != 1 {
		t.Fatalf("effects = %d, want 1", n)
	}
	if n := e.Count(t, `SELECT count(*) FROM {schema}.effects WHERE key = 'slow'`); n != 1 {
		t.Fatalf("effects of the message = %d, want 1 (the other worker's)", n)
	}
	if _, ok := applied.Load(2); !ok {
		t.Fatal("the other worker's attempt (the second) did not run the handler")
	}
	if s, started, _, _ := e.state(t, "slow"); s != "completed" || started != 2 {
		t.Fatalf("state %s, attempts started %d", s, started)
	}
}

// A handler frozen inside its transaction past the lease: the server terminates its idle session
// (idle_in_transaction_session_timeout = Lease), another worker takes the message over, and the frozen
// worker's late commit fails.
func TestFrozenHandlerCannotCommitAfterTakeover(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.receive(t, "stuck")
	var first atomic.Bool
	var lateErr atomic.Value
	thawed := make(chan struct{})
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		if first.CompareAndSwap(false, true) {
			time.Sleep(2 * time.Second) // frozen, deaf to ctx, while the server ends the session
			err := applyCredit(context.Background(), tx, e.Schema, m)
			lateErr.Store(fmt.Sprint(err))
			close(thawed)
			return err
		}
		return applyCredit(ctx, tx, e.Schema, m)
	})
	cfg := func(c *worker.Config) { c.Lease = 700 * time.Millisecond; c.Timeout = 300 * time.Millisecond }
	run(t, e.pool(t, hs, cfg))
	waitFor(t, "the frozen attempt", first.Load)
	run(t, e.pool(t, hs, cfg))
	waitFor(t, "takeover", func() bool { return e.count(t, "completed") == 1 })
	<-thawed
	if s := lateErr.Load().(string); s == "<nil>" {
		t.Fatal("the frozen handler's late write succeeded")
	}
	waitFor(t, "settled", func() bool { return e.Count(t, `SELECT count(*) FROM {schema}.inbox_queue`) == 0 })
	if n := e.Count(t, `SELECT count(*) FROM {schema}.effects`); n != 1 {
		t.Fatalf("effects = %d, want 1", n)
	}
}

// Stop with handlers in flight. Three cases: handlers that finish within Stop's deadline complete
// (Stop returns nil); handlers that block until their ctx ends are cancelled by the deadline (Stop
// returns context.DeadlineExceeded), their work rolls back and their messages go back to pending
// without being charged an attempt; and slow handlers with a short deadline, where some batches may
// finish and others be cancelled midway. In every case a new pool then completes every message exactly
// once.
func TestGracefulStopLosesNothing(t *testing.T) {
	t.Parallel()
	// stopState checks what Stop left: nothing processing, an effect per completed message and none
	// for the others, and no attempt charged to a message that did not complete.
	stopState := func(t *testing.T, e *env) {
		t.Helper()
		if n := e.Count(t, `SELECT count(*) FROM `+msgView+` m WHERE state = 'processing'`); n != 0 {
			t.Fatalf("%d messages left processing after Stop", n)
		}
		done := e.count(t, "completed")
		if n := e.Count(t, `SELECT count(*) FROM {schema}.effects`); n != done {
			t.Fatalf("effects = %d but completed = %d", n, done)
		}
		if n := e.Count(t, `SELECT count(*) FROM {schema}.inbox m LEFT JOIN {schema}.effects f USING (key)
			WHERE m.state = 'completed' AND (f.key IS NULL OR m.attempts_started <> 1 OR m.attempts_failed <> 0)`); n != 0 {
			t.Fatalf("%d completed messages without their effect or with more than one attempt", n)
		}
		if n := e.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE state = 'pending'
			AND (attempts_started <> 0 OR attempts_failed <> 0 OR last_error IS NOT NULL)`); n != 0 {
			t.Fatalf("%d messages were charged an attempt by the shutdown", n)
		}
		if n := e.Count(t, `SELECT count(*) FROM {schema}.inbox m JOIN {schema}.inbox_queue q USING (id, consumer)
			WHERE q.isolate <> 0 OR m.state <> 'pending' OR q.run_at > now()`); n != 0 || e.inFlight(t) != 0 {
			t.Fatalf("%d queue rows isolated or not ready after Stop (%d messages listed in batch rows)", n, e.inFlight(t))
		}
		if n := e.Count(t, `SELECT count(*) FROM {schema}.inbox m LEFT JOIN {schema}.inbox_queue q USING (id, consumer)
			WHERE m.state = 'pending' AND q.id IS NULL`); n != 0 {
			t.Fatalf("%d pending messages lost their queue row", n)
		}
	}
	// completeRest runs a second pool and checks that every message is completed exactly once.
	completeRest := func(t *testing.T, e *env, total int64) {
		t.Helper()
		var calls sync.Map
		hs := worker.NewHandlers()
		worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
			if _, again := calls.LoadOrStore(m.Key, true); again {
				t.Errorf("%s handled twice by the second pool", m.Key)
			}
			return applyCredit(ctx, tx, e.Schema, m)
		})
		run(t, e.pool(t, hs, nil))
		waitFor(t, "all completed", func() bool { return e.count(t, "completed") == total })
		if n := e.Count(t, `SELECT count(*) FROM {schema}.effects`); n != total {
			t.Fatalf("effects = %d, want %d", n, total)
		}
		if n := e.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE attempts_started <> 1 OR attempts_failed <> 0`); n != 0 {
			t.Fatalf("%d messages took more than one attempt", n)
		}
	}

	t.Run("handlers finish within the deadline", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.receive(t, keys("s", 200)...)
		var mu sync.Mutex
		startedKeys := map[string]bool{}
		hs := slowCredits(e, 20*time.Millisecond, func(key string) {
			mu.Lock()
			startedKeys[key] = true
			mu.Unlock()
		})
		p := e.pool(t, hs, func(c *worker.Config) { c.Concurrency = 2; c.BatchSize = 10 })
		if err := p.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "handlers in flight", func() bool { mu.Lock(); defer mu.Unlock(); return len(startedKeys) > 3 })
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // only keeps a hang from lasting
		defer cancel()
		if err := p.Stop(ctx); err != nil {
			t.Fatalf("Stop = %v, want nil: the in-flight batches had time to finish", err)
		}
		stopState(t, e)
		// Every message whose handler had started (and the rest of its batch) completed.
		mu.Lock()
		for k := range startedKeys {
			if s, started, failed, _ := e.state(t, k); s != "completed" || started != 1 || failed != 0 {
				t.Errorf("in-flight %s: %s, started %d, failed %d; want completed at the first attempt", k, s, started, failed)
			}
		}
		mu.Unlock()
		completeRest(t, e, 200)
	})

	t.Run("deadline cancels handlers blocked on ctx", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.receive(t, keys("s", 30)...)
		var blocked, returned atomic.Int64
		hs := worker.NewHandlers()
		worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
			if err := applyCredit(ctx, tx, e.Schema, m); err != nil {
				return err
			}
			blocked.Add(1)
			defer returned.Add(1)
			<-ctx.Done() // blocks until Stop's deadline cancels it
			return ctx.Err()
		})
		p := e.pool(t, hs, func(c *worker.Config) { c.Concurrency = 2; c.BatchSize = 10 })
		if err := p.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "a blocked handler in each batch", func() bool { return blocked.Load() == 2 })
		// Claimed, with the attempt not counted yet (the finish counts it, migration 00011).
		if n := e.Count(t, `SELECT count(*) FROM `+msgView+` m WHERE state = 'processing' AND attempts_started = 0`); n != 20 {
			e.Report(t)
			t.Fatalf("%d messages claimed, want two batches of 10", n)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		err := p.Stop(ctx)
		var se *worker.StopError
		if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &se) || se.Abandoned != 2 || se.Messages != 20 {
			t.Fatalf("Stop = %v, want a *worker.StopError of 2 batches, 20 messages, wrapping context.DeadlineExceeded", err)
		}
		// Stop returned at its deadline; the cancelled handlers return on their own, and none starts.
		waitFor(t, "the cancelled handlers to return", func() bool { return returned.Load() == 2 })
		if blocked.Load() != 2 {
			t.Fatalf("handlers: %d blocked; want none started after Stop", blocked.Load())
		}
		stopState(t, e)
		if n := e.count(t, "pending"); n != 30 {
			t.Fatalf("pending = %d, want all 30 back", n)
		}
		if n := e.Count(t, `SELECT count(*) FROM {schema}.effects`); n != 0 {
			t.Fatalf("effects = %d after the cancelled batches, want 0", n)
		}
		if again := p.Stop(context.Background()); again != err { //nolint:errorlint // the first call's very error value
			t.Fatalf("second Stop = %v, want the first one's result %v", again, err)
		}
		completeRest(t, e, 30)
	})

	t.Run("slow handlers, short deadline", func(t *testing.T) {
		// One runner, batches of 10: the first batch completes, then Stop comes while the 15th handler
		// (the second batch's fifth) runs. The handlers started after Stop block until its deadline
		// cancels them, so the second batch is abandoned midway: exactly 10 messages complete.
		t.Parallel()
		e := newEnv(t)
		e.receive(t, keys("s", 200)...)
		var started atomic.Int64
		var stopping atomic.Bool
		fifteenth := make(chan struct{})
		hs := worker.NewHandlers()
		worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
			n := started.Add(1)
			if err := applyCredit(ctx, tx, e.Schema, m); err != nil {
				return err
			}
			if n == 15 {
				close(fifteenth)
			}
			if stopping.Load() {
				<-ctx.Done() // started after Stop: runs until the deadline cancels it
				return ctx.Err()
			}
			select {
			case <-time.After(20 * time.Millisecond):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
		p := e.pool(t, hs, func(c *worker.Config) { c.Concurrency = 1; c.BatchSize = 10 })
		if err := p.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		<-fifteenth
		stopping.Store(true)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
		defer cancel()
		var se *worker.StopError
		if err := p.Stop(ctx); !errors.As(err, &se) || se.Abandoned != 1 || se.Messages != 10 || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Stop = %v, want a *worker.StopError of 1 batch, 10 messages, wrapping context.DeadlineExceeded", err)
		}
		waitFor(t, "no message processing", func() bool {
			return e.Count(t, `SELECT count(*) FROM `+msgView+` m WHERE state = 'processing'`) == 0
		})
		stopState(t, e)
		if n := e.count(t, "completed"); n != 10 {
			t.Fatalf("completed = %d, want the first batch's 10", n)
		}
		completeRest(t, e, 200)
	})
}

// slowCredits handles credits slowly, honouring the handler's context: started(key), the effect,
// then d (or the context's end, which fails the attempt).
func slowCredits(e *env, d time.Duration, started func(key string)) *worker.Handlers {
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		started(m.Key)
		if err := applyCredit(ctx, tx, e.Schema, m); err != nil {
			return err
		}
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	return hs
}
