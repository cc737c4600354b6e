package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox/admin"
	"github.com/txinbox/txinbox/maintain"
	"github.com/txinbox/txinbox/runner"
	"github.com/txinbox/txinbox/worker"
)

// Two worker processes are killed (SIGKILL) mid-drain, and a third pool drains the rest: the console's
// count of the hour's completed attempts equals the messages completed, once the maintainer has
// folded the batches' counts. (Counted in each pool's memory and added every few seconds, the counts
// of a killed process were lost: the console showed half the true count after two kills.)
func TestRollupCountsEveryCompletionAcrossSIGKILLs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 600
	e.receive(t, keys("r", n)...)
	for _, at := range []int64{100, 250} {
		cmd := startChild(t, e, "slow", "", "")
		waitFor(t, "the child to complete some messages", func() bool { return e.count(t, "completed") >= at })
		if err := cmd.Process.Kill(); err != nil { // SIGKILL
			t.Fatal(err)
		}
		_ = cmd.Wait()
	}
	if got := e.count(t, "completed"); got >= n {
		t.Fatalf("the children completed all %d messages before being killed", got)
	}
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		return applyCredit(ctx, tx, e.Schema, m)
	})
	run(t, e.pool(t, hs, nil))
	// The roll-up fold is the schema's maintainer's job: a Runner of no pool runs one.
	m, err := runner.New(e.Store(), runner.Config{Maintenance: maintain.Config{RollupInterval: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background()) })
	waitFor(t, "every message completed and every batch's counts folded", func() bool {
		return e.count(t, "completed") == n && e.Count(t, `SELECT count(*) FROM {schema}.inbox_rollup_batch`) == 0
	})
	// The console's overview reads admin.Overview over its last 60 minutes (its chart) and
	// sums them ("Completed 1 h").
	a, err := admin.New(e.Store(), admin.Config{})
	if err != nil {
		t.Fatal(err)
	}
	o, err := a.Overview(context.Background(), 60)
	if err != nil {
		t.Fatal(err)
	}
	var completed, failed int64
	for _, c := range o.Consumers {
		for _, m := range c.Minutes {
			if c.Consumer == "ledger" {
				completed, failed = completed+m.Completed, failed+m.Failed
			}
		}
	}
	if completed != n || failed != 0 {
		t.Fatalf("console's hour: %d completed, %d failed; want %d completed (the messages completed), 0 failed", completed, failed, n)
	}
	if got := e.Count(t, `SELECT count(*) FROM {schema}.effects`); got != n {
		t.Fatalf("effects = %d, want %d", got, n)
	}
}
