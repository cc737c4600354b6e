package worker_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/worker"
)

// A pool's claim starts past its last full claim (the claim cursor), so that it does not walk the
// rows of its own batches in flight; a message that becomes ready behind the cursor is still run, by
// a claim from the head once the queue past the cursor is empty. Here the message "late" was received
// in a transaction that began before the others were received and committed after the first batch
// was claimed: its run_at (its transaction's start) puts it ahead of every other message in claim
// order. The second claim starts past the first batch and does not take it; it runs after the queue
// past the cursor is empty, once, like every other message.
func TestClaimStartsPastTheLastFullClaim(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	lateTx, err := e.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lateTx.Rollback(ctx) }()
	if _, err := lateTx.Exec(ctx, "SELECT now()"); err != nil { // its transaction's start: now()
		t.Fatal(err)
	}
	var keys []string
	for i := range 12 {
		keys = append(keys, string(rune('a'+i)))
	}
	e.receive(t, keys...)

	var mu sync.Mutex
	var batches [][]string
	once := sync.Once{}
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		return applyCredit(ctx, tx, e.Schema, m)
	})
	p := e.pool(t, hs, func(c *worker.Config) { c.Concurrency, c.BatchSize = 1, 4 })
	worker.SetCursorLife(p, time.Hour) // however slow the machine, the second claim starts at the cursor
	worker.SetClaimHook(p, func(_ *worker.Pool, batch []string) {
		mu.Lock()
		batches = append(batches, slices.Clone(batch))
		mu.Unlock()
		once.Do(func() { // after the first claim: "late" becomes ready, behind the cursor
			if _, err := e.client.ReceiveTx(ctx, lateTx, inbox.Message{Consumer: "ledger", Key: "late", Kind: "credit",
				Payload: []byte(`{"amount": 1}`)}); err != nil {
				t.Error(err)
			}
			if err := lateTx.Commit(ctx); err != nil {
				t.Error(err)
			}
		})
	})
	run(t, p)
	waitFor(t, "every message handled", func() bool { return e.count(t, "completed") == 13 })

	mu.Lock()
	defer mu.Unlock()
	var order []string
	for _, b := range batches {
		slices.Sort(b)
		order = append(order, b...)
	}
	want := append(slices.Clone(keys), "late")
	if !slices.Equal(order, want) {
		t.Fatalf("batches %v: want a-d, e-h, i-l (each claim past the last), then late (found from the head)", batches)
	}
	if n := e.Count(t, e.SQL(`SELECT count(*) FROM {schema}.effects`)); n != 13 {
		t.Fatalf("%d effects, want 13: one per message", n)
	}
}
