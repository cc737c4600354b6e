package worker_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox/txinboxtest/pgbouncer"
	"github.com/txinbox/txinbox/worker"
)

// Behind PgBouncer in transaction mode, a batch's record (RecordBatch, committed on a connection of
// its own) needs a server session while the batch's transaction holds another. Runners that began
// their batch transactions and then waited for their turn to claim once held every session of a
// PgBouncer no bigger than the pool's Concurrency: each runner that claimed then waited for a session
// to record its batch in, none came, and every batch failed after the record's 10 s bound, again and
// again. Here 4 runners drain 24 messages, one per batch, behind a PgBouncer of 2 server sessions.
func TestPgBouncerSmallerThanConcurrencyDrains(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	db, err := pgxpool.New(ctx, pgbouncer.Start(t, e.URL, pgbouncer.Config{PoolSize: 2})+"&default_query_exec_mode=exec")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)

	const n = 24
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%02d", i)
	}
	e.receive(t, keys...)
	var handled atomic.Int64
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		handled.Add(1)
		return applyCredit(ctx, tx, e.Schema, m)
	})
	var logs logBuffer
	st := e.Store()
	st.DB, st.Logger, st.NotifyInterval = db, logs.logger(), -1
	p := e.poolOn(t, st, hs, func(c *worker.Config) { c.Concurrency, c.BatchSize = 4, 1 })
	run(t, p)
	var fails []map[string]any
	waitFor(t, "every message completed, or a claim failed", func() bool {
		fails = logs.find(t, "txinbox: claim failed")
		return len(fails) != 0 || e.count(t, "completed") == n
	})
	if len(fails) != 0 {
		t.Fatalf("%d claims failed behind a PgBouncer smaller than the pool, the first: %v", len(fails), fails[0])
	}
	if got := handled.Load(); got != n {
		t.Fatalf("%d handler calls for %d messages", got, n)
	}
}
