package worker_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
	"github.com/txinbox/txinbox/worker"
)

// The statements that read a claimed message's inbox row by its id (the claims, the finish, the
// next message of a key) are planned with their values at every run, whatever the session's
// plan_cache_mode: a generic plan made while the current inbox partition looked empty read that row
// through the unique key (consumer, key, slot) by consumer alone, filtering on the id, so that a
// claim of 64 read the whole partition 64 times once it had grown (30,000 rows: 144,000 buffers,
// 700 ms a claim, and a pool that fell seconds behind 1,000 messages/s). The session here forces
// generic plans, as a server's settings may; the handlers' own statements keep the session's mode.
// (On Citus, which cannot run a forced generic plan, the acceptance run leaves this test out.)
func TestClaimAndFinishIgnoreForcedGenericPlans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
	cfg.MaxConns = 3
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	st := txinbox.Store{DB: pool, Schema: db.Schema}
	c, err := inbox.New(st, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	hs := worker.NewHandlers()
	var handled atomic.Int64
	modes := make(chan string, 100)
	worker.Handle(hs, "k", func(ctx context.Context, tx pgx.Tx, m *worker.Message[struct{}]) error {
		var mode string
		if err := tx.QueryRow(ctx, "SELECT current_setting('plan_cache_mode')").Scan(&mode); err != nil {
			return err
		}
		select {
		case modes <- mode:
		default:
		}
		handled.Add(1)
		return nil
	})
	p, err := worker.New(st, worker.Config{Consumer: "plans", Handlers: hs, Concurrency: 1, BatchSize: 8})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// One message at a time: the first claims run on an inbox that looks empty; an ordering key
	// gives the finish a next message to make ready.
	const n = 12
	for i := range n {
		if _, err := c.Receive(ctx, inbox.Message{Consumer: "plans", Key: fmt.Sprintf("m%02d", i), Kind: "k",
			Payload: []byte(`{}`), OrderingKey: "key"}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the message handled", func() bool { return handled.Load() == int64(i+1) })
	}
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	close(modes)
	for mode := range modes {
		if mode != "force_generic_plan" {
			t.Errorf("a handler ran with plan_cache_mode %q, want the session's force_generic_plan", mode)
		}
	}
	// Every statement the pool prepared on its connections: the claim, the finish and ReadyNext
	// were planned with their values every time.
	runs := map[string]int64{}
	for _, conn := range pool.AcquireAllIdle(ctx) {
		rows, err := conn.Query(ctx, `SELECT substring(statement from 'name: (\w+)'), generic_plans, custom_plans
			FROM pg_prepared_statements WHERE statement ~ 'name: (ClaimBatch|FinishBatch|ReadyNext) '`)
		if err != nil {
			t.Fatal(err)
		}
		var name string
		var generic, custom int64
		if _, err := pgx.ForEachRow(rows, []any{&name, &generic, &custom}, func() error {
			if generic > 0 {
				t.Errorf("%s ran %d times with a generic plan (and %d with custom plans)", name, generic, custom)
			}
			runs[name] += custom
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		conn.Release()
	}
	for _, name := range []string{"ClaimBatch", "FinishBatch", "ReadyNext"} {
		if runs[name] == 0 {
			t.Errorf("%s never ran with a custom plan on the pool's connections (runs: %v)", name, runs)
		}
	}
}
