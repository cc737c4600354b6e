package worker_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/admin"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/worker"
)

// A paused consumer is claimed by no pool of any process (two pools, each on a connection pool of
// its own, as two processes would have), however often they are woken and poll: its messages stay
// queued as they were (no attempt charged, no run time moved), while another consumer's pool keeps
// working. Resumed, its messages are handled, each exactly once.
func TestPausedConsumerIsClaimedByNoPoolUntilResumed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	a, err := admin.New(e.Store(), admin.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	calls := map[string]int{}
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		mu.Lock()
		calls[m.Consumer+"/"+m.Key]++
		mu.Unlock()
		return applyCredit(ctx, tx, e.Schema, m)
	})
	for i := range 2 { // two processes
		cfg, _ := pgxpool.ParseConfig(e.URL)
		cfg.MaxConns = 4
		db, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(db.Close)
		store := txinbox.Store{DB: db, Schema: e.Schema}
		run(t, e.poolOn(t, store, hs, func(c *worker.Config) { c.Owner = fmt.Sprintf("process-%d", i); c.Concurrency = 2 }))
		if i == 0 {
			run(t, e.poolOn(t, store, hs, func(c *worker.Config) { c.Consumer = "other"; c.Owner = "process-0" }))
		}
	}
	if ok, err := a.Pause(ctx, admin.Inbox, "ledger", "test", "ledger downstream broken"); err != nil || !ok {
		t.Fatalf("Pause = %v, %v; want true, nil", ok, err)
	}
	e.receive(t, keys("k", 40)...) // each Receive notifies the pools: they claim, and find nothing
	queue := func() string {
		var s string
		if err := e.Pool.QueryRow(ctx, e.SQL(`SELECT string_agg(format('%s:%s:%s:%s:%s', q.id, q.run_at, q.attempts_started, q.token, m.attempts_started), ',' ORDER BY q.id)
			FROM {schema}.inbox_queue q JOIN {schema}.inbox m ON m.id = q.id AND m.consumer = q.consumer
			WHERE q.consumer = 'ledger'`)).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := queue()
	if _, err := e.client.Receive(ctx, inbox.Message{Consumer: "other", Key: "o", Kind: "credit", Payload: []byte(`{"amount": 1}`)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the other consumer's message", func() bool {
		return e.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE consumer = 'other' AND state = 'completed'`) == 1
	})
	time.Sleep(time.Second) // 50 poll intervals, hot polling included
	mu.Lock()
	n := len(calls)
	mu.Unlock()
	if n != 1 {
		t.Fatalf("%d messages handled while ledger was paused, want 1 (other's)", n)
	}
	if after := queue(); after != before {
		t.Fatalf("the paused consumer's queue changed:\nbefore %s\nafter  %s", before, after)
	}

	if ok, err := a.Resume(ctx, admin.Inbox, "ledger"); err != nil || !ok {
		t.Fatalf("Resume = %v, %v; want true, nil", ok, err)
	}
	waitFor(t, "the resumed consumer's messages", func() bool { return e.count(t, "completed") == 41 })
	mu.Lock()
	defer mu.Unlock()
	for k, c := range calls {
		if c != 1 {
			t.Errorf("%s handled %d times, want once", k, c)
		}
	}
	if len(calls) != 41 {
		t.Errorf("%d messages handled, want 41", len(calls))
	}
	if n := e.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE consumer = 'ledger' AND attempts_started <> 1`); n != 0 {
		t.Errorf("%d resumed messages with other than one attempt", n)
	}
}

// A consumer paused while its pool drains a backlog stops after the batches in flight at the pause:
// once they end, no message of it starts however long the pool polls, while another consumer's pool
// keeps working. The pause is kept in the schema, not in the pool: the pool stopped and a new one
// started, woken by new messages, still claims nothing of the consumer. Resumed, the rest of the
// backlog is handled, each message once.
func TestPauseWhileDrainingABacklog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	a, err := admin.New(e.Store(), admin.Config{})
	if err != nil {
		t.Fatal(err)
	}
	const backlog, holdAt = 200, 20
	e.receive(t, keys("k", backlog)...)

	// The handlers of ledger from its holdAt-th message on wait for release: the two runners each
	// stop in a batch, so that the pause commits while no claim of ledger is under way and the
	// batches in flight are known.
	var (
		mu       sync.Mutex
		calls    = map[string]int{} // consumer/key: handler calls
		released bool
		held     int
		release  = make(chan struct{})
	)
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		mu.Lock()
		calls[m.Consumer+"/"+m.Key]++
		wait := m.Consumer == "ledger" && !released && len(calls) >= holdAt
		if wait {
			held++
		}
		mu.Unlock()
		if wait {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return applyCredit(ctx, tx, e.Schema, m)
	})
	ledgerPool := func() *worker.Pool {
		return e.pool(t, hs, func(c *worker.Config) { c.Concurrency = 2; c.BatchSize = 5 })
	}
	first := ledgerPool()
	run(t, first)
	run(t, e.pool(t, hs, func(c *worker.Config) { c.Consumer = "other" }))
	started := func() map[string]bool { // the ledger messages whose handler was called
		mu.Lock()
		defer mu.Unlock()
		out := map[string]bool{}
		for k := range calls {
			if key, ok := strings.CutPrefix(k, "ledger/"); ok {
				out[key] = true
			}
		}
		return out
	}
	waitFor(t, "both runners to hold a batch", func() bool { mu.Lock(); defer mu.Unlock(); return held == 2 })

	// Allowed to start from now on: the messages of the two batches in flight.
	allowed := started()
	rows, err := e.Pool.Query(ctx, e.SQL(`SELECT m.key FROM {schema}.inbox_batch b
		JOIN {schema}.inbox m ON m.consumer = b.consumer AND m.id = ANY (b.ids) WHERE b.consumer = 'ledger'`))
	if err != nil {
		t.Fatal(err)
	}
	inFlight, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range inFlight {
		allowed[k] = true
	}
	if n := e.Count(t, `SELECT count(*) FROM {schema}.inbox_batch WHERE consumer = 'ledger'`); n != 2 || len(inFlight) > 10 {
		t.Fatalf("%d batches in flight with %d messages, want 2 of at most 5", n, len(inFlight))
	}
	if ok, err := a.Pause(ctx, admin.Inbox, "ledger", "test", "downstream broken"); err != nil || !ok {
		t.Fatalf("Pause = %v, %v; want true, nil", ok, err)
	}
	mu.Lock()
	released = true
	mu.Unlock()
	close(release)

	queue := func() string { // the paused consumer's queue, as it must stay
		var s string
		if err := e.Pool.QueryRow(ctx, e.SQL(`SELECT coalesce(string_agg(format('%s:%s:%s:%s', id, run_at, attempts_started, token), ',' ORDER BY id), '')
			FROM {schema}.inbox_queue WHERE consumer = 'ledger'`)).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	otherDone := 0
	others := func(n int) { // n messages of the other consumer, handled while ledger is paused
		t.Helper()
		for range n {
			k := fmt.Sprintf("o-%d", otherDone)
			otherDone++
			if _, err := e.client.Receive(ctx, inbox.Message{Consumer: "other", Key: k, Kind: "credit", Payload: []byte(`{"amount": 1}`)}); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, "the other consumer's messages", func() bool {
			return e.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE consumer = 'other' AND state = 'completed'`) == int64(otherDone)
		})
	}
	paused := func(when string) {
		t.Helper()
		waitFor(t, "the batches in flight to end", func() bool {
			return e.Count(t, `SELECT count(*) FROM {schema}.inbox_batch WHERE consumer = 'ledger'`) == 0
		})
		before := queue()
		others(5)
		time.Sleep(time.Second) // 50 poll intervals, hot polling included
		for k := range started() {
			if !allowed[k] {
				t.Fatalf("%s: ledger message %s started after the pause, outside the batches in flight at it", when, k)
			}
		}
		if after := queue(); after != before {
			t.Fatalf("%s: the paused consumer's queue changed:\nbefore %s\nafter  %s", when, before, after)
		}
	}
	paused("pool draining")

	// A new pool, after the first stopped: the pause holds, even for messages received now.
	stopCtx, cancel := context.WithTimeout(ctx, time.Minute) // only keeps a hang from lasting
	defer cancel()
	if err := first.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	run(t, ledgerPool())
	e.receive(t, keys("n", 10)...) // each Receive notifies the new pool: it claims, and finds nothing
	paused("new pool")

	if ok, err := a.Resume(ctx, admin.Inbox, "ledger"); err != nil || !ok {
		t.Fatalf("Resume = %v, %v; want true, nil", ok, err)
	}
	const total = backlog + 10
	waitFor(t, "the resumed consumer's messages", func() bool {
		return e.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE consumer = 'ledger' AND state = 'completed'`) == total
	})
	mu.Lock()
	defer mu.Unlock()
	for k, c := range calls {
		if c != 1 {
			t.Errorf("%s handled %d times, want once", k, c)
		}
	}
	if len(calls) != total+otherDone {
		t.Errorf("%d messages handled, want %d", len(calls), total+otherDone)
	}
	if n := e.Count(t, `SELECT count(*) FROM {schema}.effects`); n != int64(total+otherDone) {
		t.Errorf("%d effects, want %d (one per message)", n, total+otherDone)
	}
	if n := e.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE consumer = 'ledger' AND attempts_started <> 1`); n != 0 {
		t.Errorf("%d ledger messages with other than one attempt", n)
	}
}
