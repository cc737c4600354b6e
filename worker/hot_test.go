package worker_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox/worker"
)

// A batch's finish updates each message's inbox row in place (a HOT update: no new index entries, no
// other page), even when it updates every row of a page in one transaction (migration 00007). At the
// fillfactor before it, most of a big batch's finishes moved their row to another page and added an
// entry to both indexes of the table. Counted by PostgreSQL's statistics, which the workers' sessions
// report when they end.
func TestFinishUpdatesAreHOT(t *testing.T) {
	t.Parallel()
	const n = 600
	e := newEnv(t)
	e.receive(t, keys("h", n)...)
	ctx := context.Background()
	db, err := pgxpool.New(ctx, e.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	hs := worker.NewHandlers()
	worker.HandleBatch(hs, "credit", func(ctx context.Context, tx pgx.Tx, msgs []*worker.Message[credit]) error {
		return applyCredits(ctx, tx, e.Schema, msgs)
	}, worker.HandlerConfig{BatchSize: n})
	p := batchPool(t, e, db, hs, func(c *worker.Config) { c.Concurrency = 1 })
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every message completed", func() bool { return e.count(t, "completed") == n })
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	db.Close() // the sessions report their statistics as they end
	var updated, hot int64
	waitFor(t, "the workers' statistics", func() bool {
		if err := e.Pool.QueryRow(ctx, `SELECT coalesce(sum(n_tup_upd), 0)::bigint, coalesce(sum(n_tup_hot_upd), 0)::bigint
			FROM pg_stat_user_tables WHERE schemaname = $1 AND relname LIKE 'inbox\_s%'`, e.Schema).Scan(&updated, &hot); err != nil {
			t.Fatal(err)
		}
		return updated >= n
	})
	if hot != updated {
		t.Fatalf("%d of %d updates of inbox rows were HOT, want all", hot, updated)
	}
}
