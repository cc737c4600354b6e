package main

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/examples/ledger/internal/demo"
	"github.com/txinbox/txinbox/examples/ledger/internal/ledger"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
	"github.com/txinbox/txinbox/worker"
)

// A poison event in the middle of a batch of 200 handed to the batch handler: the other 199 complete
// in their first attempt, once; the poison is retried, then dead; the ledger holds exactly the 199
// entries, and every account's balance is the sum of its events but the poison.
func TestBatchHandlerPoisonInBatchOf200(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	if err := ledger.Migrate(ctx, db.Pool.Config().ConnConfig, db.Schema); err != nil {
		t.Fatal(err)
	}
	c, err := inbox.New(db.Store(), inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	const n, poison = 200, "evt-100"
	want := map[string]int64{}
	var msgs []inbox.Message
	for i := range n {
		ev := ledger.OrderPaid{EventID: fmt.Sprint("evt-", i), OrderID: fmt.Sprint("ord-", i),
			AccountID: fmt.Sprint("acct-", i%7), AmountCents: int64(100 + i), OccurredAt: time.Now()}
		b, _ := json.Marshal(ev)
		msgs = append(msgs, inbox.Message{Consumer: ledger.Consumer, Key: ev.EventID, Kind: ledger.KindOrderPaid, Payload: b})
		if ev.EventID != poison {
			want[ev.AccountID] += ev.AmountCents
		}
	}
	if _, err := c.ReceiveMany(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	l, err := ledger.New(db.Store())
	if err != nil {
		t.Fatal(err)
	}
	hs := worker.NewHandlers()
	worker.HandleBatch(hs, ledger.KindOrderPaid, (&demo.Faults{Poison: map[string]bool{poison: true}}).Inject(db.Schema, l.Handler(nil)),
		worker.HandlerConfig{MaxAttempts: 3})
	p, err := worker.New(db.Store(), worker.Config{Consumer: ledger.Consumer, Handlers: hs,
		Concurrency: 1, PollInterval: 20 * time.Millisecond, // the default Timeout: a stalled statement does not time out
		Backoff: txinbox.BackoffFunc(func(int) time.Duration { return 10 * time.Millisecond })})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = p.Stop(sctx)
	})
	deadline := time.Now().Add(2 * time.Minute)
	for db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE state IN ('completed', 'dead')`) != n {
		if time.Now().After(deadline) {
			t.Fatal("gave up waiting for the batch to settle")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE key = $1 AND state = 'dead' AND attempts_failed = 3`, poison); got != 1 {
		t.Fatalf("%s is not dead after 3 failed attempts", poison)
	}
	if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE state = 'completed' AND attempts_started = 1 AND attempts_failed = 0
		AND (result->>'entry_id')::bigint > 0`); got != n-1 {
		t.Fatalf("%d messages completed in their first attempt with a result, want %d", got, n-1)
	}
	if got := db.Count(t, `SELECT count(*) FROM {schema}.ledger_entries`); got != n-1 {
		t.Fatalf("ledger entries = %d, want %d", got, n-1)
	}
	if got := db.Count(t, `SELECT count(*) FROM {schema}.ledger_entries WHERE event_id = $1`, poison); got != 0 {
		t.Fatal("the poison event has an entry")
	}
	for acct, sum := range want {
		if got := db.Count(t, `SELECT balance_cents FROM {schema}.accounts WHERE account_id = $1
			AND entries = (SELECT count(*) FROM {schema}.ledger_entries WHERE account_id = $1)`, acct); got != sum {
			t.Errorf("account %s: balance %d, want %d (or its entry count is off)", acct, got, sum)
		}
	}
}
