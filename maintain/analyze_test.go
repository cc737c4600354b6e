package maintain_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/maintain"
	"github.com/txinbox/txinbox/worker"
)

// A table the worker reads that has outgrown its statistics many times over is analyzed by the
// maintainer the pool started (the statistics safety net), so that plans made while it was small are made again: generic plans
// made from the statistics of a few dozen rows read the whole table per message once it has grown
// (docs/design/generic-plans.md, "Generic plans frozen while the tables were small"). Autovacuum is off for the table, as it is on this
// project's test server: nothing else analyzes it.
func TestMaintainerAnalyzesTablesThatOutgrewTheirStatistics(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	inboxS0 := e.outgrownInboxS0(t)
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error { return nil })
	run(t, e.pool(t, hs, nil))
	e.waitAnalyzed(t, inboxS0)
}

// An ANALYZE of the safety net that another session's ANALYZE makes skip the table (SKIP_LOCKED) is
// retried at the next check, 10 seconds later, with no warning. (The safety net used to log "is this
// role their owner?" and leave the table's statistics stale for 5 minutes.)
func TestMaintainerAnalyzesAgainAfterAnotherSessionsAnalyze(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	inboxS0 := e.outgrownInboxS0(t)
	ctx := context.Background()
	// Another session's ANALYZE holds the lock ANALYZE takes (SHARE UPDATE EXCLUSIVE).
	other, err := e.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Rollback(ctx) }()
	if _, err := other.Exec(ctx, "LOCK TABLE "+inboxS0+" IN SHARE UPDATE EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error { return nil })
	run(t, e.poolLogging(t, logs, hs, func(c *worker.Config, m *maintain.Config) {
		// No health check: it reads the whole server's xmin horizon, and warns about any session on it
		// idle in a transaction for HorizonWarnAge. The warnings this test is about are the safety
		// net's.
		maintain.SetHealthCheckInterval(m, -1)
	}))
	waitFor(t, "the maintainer's ANALYZE while the other session holds the table", func() bool {
		return len(logs.find(t, "txinbox: analyzed tables that outgrew their statistics")) > 0
	})
	if err := other.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	e.waitAnalyzed(t, inboxS0)
	for _, r := range logs.records(t) {
		if r["level"] == "WARN" {
			t.Errorf("warning logged: %v", r["msg"])
		}
	}
}

// outgrownInboxS0 fills inbox_s0 (autovacuum off for it) to 20 times the rows its statistics count,
// and returns its quoted name.
func (e *env) outgrownInboxS0(t *testing.T) string {
	t.Helper()
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
	// Where autovacuum runs, keep it off this table, so that only the maintainer can analyze it.
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
	if tuples := e.reltuples(t, inboxS0); tuples > 1000 {
		t.Skipf("inbox_s0 was analyzed by someone else (autovacuum?): reltuples %v", tuples)
	}
	return inboxS0
}

func (e *env) reltuples(t *testing.T, table string) float64 {
	t.Helper()
	var tuples float64
	if err := e.Pool.QueryRow(context.Background(), "SELECT reltuples FROM pg_class WHERE oid = $1::regclass", table).Scan(&tuples); err != nil {
		t.Fatal(err)
	}
	return tuples
}

// waitAnalyzed waits until table's statistics count the 20,000 rows outgrownInboxS0 put in it.
func (e *env) waitAnalyzed(t *testing.T, table string) {
	t.Helper()
	waitFor(t, table+"'s statistics to count its rows", func() bool { return e.reltuples(t, table) >= 10000 })
}
