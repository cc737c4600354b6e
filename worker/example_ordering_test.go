package worker_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
	"github.com/txinbox/txinbox/worker"
)

type accountEvent struct {
	Seq    int    `json:"seq"`
	Action string `json:"action"`
}

// Messages with one OrderingKey run one at a time, in the order they were received, even with many
// workers; a message that fails holds back the later messages of its key (and only those) until it
// completes or is dead. Messages of other keys run in parallel meanwhile.
func Example_orderingKey() {
	ctx := context.Background()
	db, schema, cleanup := testdb.ForExample()
	defer cleanup()
	client, err := inbox.New(txinbox.Store{DB: db, Schema: schema}, inbox.Config{})
	if err != nil {
		panic(err)
	}

	var failedOnce atomic.Bool // the first attempt of message 1 fails, as a database outage would
	handlers := worker.NewHandlers()
	worker.Handle(handlers, "AccountEvent", func(ctx context.Context, tx pgx.Tx, m *worker.Message[accountEvent]) error {
		if m.Payload.Seq == 1 && failedOnce.CompareAndSwap(false, true) {
			fmt.Println(m.Payload.Seq, m.Payload.Action, "attempt", m.Attempt, "fails")
			return errors.New("ledger unavailable")
		}
		fmt.Println(m.Payload.Seq, m.Payload.Action, "attempt", m.Attempt)
		return nil
	}, worker.HandlerConfig{Backoff: txinbox.BackoffFunc(func(int) time.Duration { return 10 * time.Millisecond })})
	events := make(eventLog, 16)
	pool, err := worker.New(txinbox.Store{DB: db, Schema: schema, Tracer: events}, worker.Config{Consumer: "accounts", Handlers: handlers,
		Concurrency: 4})
	if err != nil {
		panic(err)
	}

	// Received before the pool starts, so that every worker could take any of them.
	var msgs []inbox.Message
	for i, action := range []string{"open", "deposit", "withdraw"} {
		msgs = append(msgs, inbox.Message{
			Consumer: "accounts", Key: fmt.Sprintf("acct-7:%d", i+1), Kind: "AccountEvent",
			Payload:     fmt.Appendf(nil, `{"seq": %d, "action": %q}`, i+1, action),
			OrderingKey: "acct-7",
		})
	}
	if _, err := client.ReceiveMany(ctx, msgs); err != nil {
		panic(err)
	}
	if err := pool.Start(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = pool.Stop(ctx) }()
	for completed := 0; completed < len(msgs); {
		if e := <-events; e.End.Outcome == txinbox.OutcomeCompleted {
			completed++
		}
	}
	// Output:
	// 1 open attempt 1 fails
	// 1 open attempt 2
	// 2 deposit attempt 1
	// 3 withdraw attempt 1
}
