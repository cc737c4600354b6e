package maintain_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/maintain"
	"github.com/txinbox/txinbox/txinboxtest/tracerec"
	"github.com/txinbox/txinbox/worker"
)

// The finished attempts (completed, failed, of which dead) are counted by the batches and folded by
// the maintainer into inbox_rollup, and the Store's Tracer is still told about each of them;
// the dead letter is in the dead-letter set kept by the triggers.
func TestRollupCountsFinishedAttempts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.receive(t, "ok-1", "ok-2", "ok-3", "flaky", "poison")
	var flaky atomic.Int64
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		switch m.Key {
		case "flaky":
			if flaky.Add(1) == 1 {
				return errors.New("try again")
			}
		case "poison":
			return txinbox.Permanent(errors.New("cannot apply"))
		}
		return applyCredit(ctx, tx, e.Schema, m)
	})
	rec := &tracerec.Recorder{}
	run(t, e.with(rec).pool(t, hs, func(c *worker.Config, m *maintain.Config) {
		m.RollupInterval = 50 * time.Millisecond
	}))
	waitFor(t, "six outcomes told", func() bool { return len(rec.Ops(txinbox.OpHandled)) == 6 })
	var completed, failed, dead int64
	waitFor(t, "the roll-up of the six attempts", func() bool {
		if err := e.Pool.QueryRow(context.Background(), e.SQL(`SELECT coalesce(sum(completed), 0)::bigint, coalesce(sum(failed), 0)::bigint,
			coalesce(sum(dead), 0)::bigint FROM {schema}.inbox_rollup WHERE consumer = 'ledger'`)).Scan(&completed, &failed, &dead); err != nil {
			t.Fatal(err)
		}
		return completed+failed >= 6
	})
	if completed != 4 || failed != 2 || dead != 1 {
		t.Fatalf("rollup: completed %d, failed %d, dead %d; want 4, 2, 1", completed, failed, dead)
	}
	if n := e.Count(t, `SELECT count(*) FROM {schema}.inbox_rollup_batch`); n != 0 {
		t.Fatalf("%d per-batch rows left after the fold", n)
	}
	if n := e.Count(t, `SELECT count(*) FROM {schema}.inbox_dead d JOIN {schema}.inbox m ON m.id = d.id AND m.consumer = d.consumer WHERE m.key = 'poison' AND d.consumer = 'ledger'`); n != 1 {
		t.Fatalf("dead-letter set: %d rows for the poison message, want 1", n)
	}
}

// The outcomes a pool records outside the batch transaction are counted too: here a handler ends the
// batch transaction itself (COMMIT), so the pool records the outcome of the message run before it
// (committed with it) and the culprit's death in a statement of their own, and runs the last message
// again in a batch of its own. The roll-up counts each attempt once: two completed, one failed (dead).
func TestRollupCountsOutcomesRecordedOutsideTheBatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.receive(t, "a-1", "b-ender", "c-1") // one batch, run in this order
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		if err := applyCredit(ctx, tx, e.Schema, m); err != nil {
			return err
		}
		if m.Key == "b-ender" {
			_, err := tx.Exec(ctx, "COMMIT")
			return err
		}
		return nil
	})
	run(t, e.pool(t, hs, func(c *worker.Config, m *maintain.Config) {
		c.Concurrency, c.BatchSize = 1, 10
		m.RollupInterval = 50 * time.Millisecond
	}))
	var completed, failed, dead int64
	waitFor(t, "the roll-up of the three messages", func() bool {
		if err := e.Pool.QueryRow(context.Background(), e.SQL(`SELECT coalesce(sum(completed), 0)::bigint, coalesce(sum(failed), 0)::bigint,
			coalesce(sum(dead), 0)::bigint FROM {schema}.inbox_rollup WHERE consumer = 'ledger'`)).Scan(&completed, &failed, &dead); err != nil {
			t.Fatal(err)
		}
		return completed+failed >= 3 && e.Count(t, `SELECT count(*) FROM {schema}.inbox_rollup_batch`) == 0
	})
	if completed != 2 || failed != 1 || dead != 1 {
		t.Fatalf("rollup: completed %d, failed %d, dead %d; want 2, 1, 1", completed, failed, dead)
	}
}
