package worker_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/worker"
)

// A claim takes every message committed before it runs, including those received while its runner
// waited for its turn among the pool's runners with its batch transaction already begun. The claim
// once compared run_at (the receiving transaction's start) with now(), its own transaction's start:
// a message received during the wait was left to the next claim, and under load every claim left
// behind the messages of about one claim's round trip. Here the pool polls once an hour and does not
// listen, so a message the first claim leaves behind is not run during the test. The attempt is
// recorded as started at the batch's start, after its claim, so never before the message was due.
func TestClaimTakesMessagesReceivedWhileItWaitedForItsTurn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	app := fmt.Sprintf("turnwait-%d", time.Now().UnixNano())
	cfg, err := pgxpool.ParseConfig(e.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	cfg.MaxConns = 3
	db, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	var handled atomic.Int64
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		handled.Add(1)
		return applyCredit(ctx, tx, e.Schema, m)
	})
	st := e.Store()
	st.DB = db
	p := e.poolOn(t, st, hs, func(c *worker.Config) {
		c.Concurrency, c.PollInterval = 1, time.Hour
		worker.NoListen(c)
		worker.SetHotWindow(c, -1)
	})
	release := worker.HoldTurn(p)
	run(t, p)
	waitFor(t, "the runner's batch transaction begun, waiting for its turn", func() bool {
		return e.Count(t, `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = $1 AND state = 'idle in transaction'`, app) == 1
	})
	time.Sleep(10 * time.Millisecond) // the receive's transaction starts strictly later
	if _, err := e.client.Receive(ctx, inbox.Message{Consumer: "ledger", Key: "during-the-wait", Kind: "credit",
		Payload: []byte(`{"amount": 1}`)}); err != nil {
		t.Fatal(err)
	}
	release()
	waitFor(t, "the message taken by the claim that waited", func() bool { return handled.Load() == 1 })
	// The attempt's recorded start is the batch's, after its claim: not before the message was due.
	waitFor(t, "the message completed", func() bool { return e.count(t, "completed") == 1 })
	if n := e.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE started_at < next_run_at`); n != 0 {
		t.Fatalf("%d messages recorded as started before they were due", n)
	}
}
