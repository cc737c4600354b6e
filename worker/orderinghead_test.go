package worker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/worker"
)

// Only the head of an ordering key (its oldest queued message) is claimed: when the head fails, the
// key's next message waits for the head's retry to complete, even though one claim could have taken
// both into the same batch. A message without an ordering key is not held back.
func TestOrderingHeadFailureHoldsBackItsKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	msgs := []inbox.Message{
		{Consumer: "ledger", Key: "first", Kind: "credit", Payload: []byte(`{"amount": 1}`), OrderingKey: "acct-1"},
		{Consumer: "ledger", Key: "second", Kind: "credit", Payload: []byte(`{"amount": 1}`), OrderingKey: "acct-1"},
		{Consumer: "ledger", Key: "free", Kind: "credit", Payload: []byte(`{"amount": 1}`)},
	}
	if _, err := e.client.ReceiveMany(context.Background(), msgs); err != nil {
		t.Fatal(err)
	}
	var firstCalls, early atomic.Int64
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		switch m.Key {
		case "first":
			if firstCalls.Add(1) == 1 {
				return errors.New("fails once")
			}
		case "second":
			var state string
			if err := tx.QueryRow(ctx, e.SQL(`SELECT state FROM {schema}.inbox WHERE key = 'first'`)).Scan(&state); err != nil {
				return err
			}
			if state != "completed" {
				early.Add(1)
			}
		}
		return applyCredit(ctx, tx, e.Schema, m)
	})
	p := e.pool(t, hs, func(c *worker.Config) { c.Concurrency = 1 })
	// A snooze of a millisecond, not the tests' hour: the rescuer may snooze "second" (blocked behind
	// "first") before the first claim, and an hour's snooze would keep it out of every claim, so that
	// a claim taking more than a key's head would go unnoticed. Snoozed or not, only the head's
	// completion may let "second" run.
	worker.SetOrderingSnooze(p, time.Millisecond)
	run(t, p)
	waitFor(t, "all completed", func() bool { return e.count(t, "completed") == 3 })
	if n := early.Load(); n != 0 {
		t.Fatalf("the key's second message ran %d times before its first completed", n)
	}
	if s, started, failed, _ := e.state(t, "first"); s != "completed" || started != 2 || failed != 1 {
		t.Fatalf("first: %s, started %d, failed %d; want completed at the second attempt", s, started, failed)
	}
}
