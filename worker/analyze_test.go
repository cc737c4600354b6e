package worker_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/worker"
)

// A table the worker reads that has outgrown its statistics many times over is analyzed by the pool
// (the statistics safety net), so that plans made while it was small are made again: generic plans
// made from the statistics of a few dozen rows read the whole table per message once it has grown
// (bench/RESULTS.md, "generic plans frozen"). Autovacuum is off for the table, as it is on this
// project's test server: nothing else analyzes it.
func TestPoolAnalyzesTablesThatOutgrewTheirStatistics(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	receive := func(from, n int) {
		msgs := make([]inbox.Message, n)
		for i := range msgs {
			msgs[i] = inbox.Message{Consumer: "ledger", Key: fmt.Sprintf("s-%06d", from+i), Kind: "credit", Payload: []byte(`{"amount": 1}`)}
		}
		if _, err := e.client.ReceiveMany(ctx, msgs); err != nil {
			t.Fatal(err)
		}
	}
	inboxS0 := pgx.Identifier{e.Schema, "inbox_s0"}.Sanitize()
	// Where autovacuum runs, keep it off this table, so that only the pool can analyze it.
	if _, err := e.Pool.Exec(ctx, "ALTER TABLE "+inboxS0+" SET (autovacuum_enabled = false)"); err != nil {
		t.Fatal(err)
	}
	receive(0, 50)
	if _, err := e.Pool.Exec(ctx, "ANALYZE "+inboxS0); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 20; i++ {
		receive(i*1000, 1000)
	}
	var tuples float64
	if err := e.Pool.QueryRow(ctx, "SELECT reltuples FROM pg_class WHERE oid = $1::regclass", inboxS0).Scan(&tuples); err != nil {
		t.Fatal(err)
	}
	if tuples > 1000 {
		t.Skipf("inbox_s0 was analyzed by someone else (autovacuum?): reltuples %v", tuples)
	}
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error { return nil })
	run(t, e.pool(t, hs, nil))
	waitFor(t, "inbox_s0's statistics to count its rows", func() bool {
		if err := e.Pool.QueryRow(ctx, "SELECT reltuples FROM pg_class WHERE oid = $1::regclass", inboxS0).Scan(&tuples); err != nil {
			t.Fatal(err)
		}
		return tuples >= 10000
	})
}
