package worker_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox/worker"
)

// TestPoolVacuumsChurnedQueue shows the safety net of Config.QueueVacuumThreshold: with autovacuum
// off for the queue table (as when it is off on the server, or its workers are busy elsewhere), the
// pool itself vacuums inbox_queue once its dead rows pass the threshold, and the dead rows are gone.
func TestPoolVacuumsChurnedQueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	queue := pgx.Identifier{e.Schema, "inbox_queue"}.Sanitize()
	if _, err := e.Pool.Exec(ctx, "ALTER TABLE "+queue+" SET (autovacuum_enabled = false)"); err != nil {
		t.Fatal(err)
	}
	manual := func() int64 {
		return e.Count(t, `SELECT pg_stat_get_vacuum_count(to_regclass($1))`, queue)
	}
	before := manual()
	const n = 600 // each message leaves two dead queue rows: the claimed one and the deleted one
	e.receive(t, keys("v", n)...)
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		return applyCredit(ctx, tx, e.Schema, m)
	})
	run(t, e.pool(t, hs, func(c *worker.Config) { c.QueueVacuumThreshold = 100 }))
	waitFor(t, "every message completed", func() bool { return e.count(t, "completed") == n })
	// Once nothing churns, the next check (every 5s) vacuums whatever is left above the threshold.
	waitFor(t, "the pool's vacuum of the queue table, leaving at most 100 dead rows", func() bool {
		return manual() > before && e.Count(t, `SELECT pg_stat_get_dead_tuples(to_regclass($1))`, queue) <= 100
	})
	if got := e.Count(t, `SELECT count(*) FROM {schema}.effects`); got != n {
		t.Fatalf("effects = %d, want %d", got, n)
	}
}
