package worker_test

import (
	"context"
	"fmt"
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
