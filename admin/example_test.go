package admin_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/admin"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
	"github.com/txinbox/txinbox/worker"
)

// waitUntil polls cond every 10ms, as an application would poll a dashboard; it panics if cond is
// still false after a minute (the examples normally wait milliseconds).
func waitUntil(cond func() bool) {
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			panic("example: condition not reached in a minute")
		}
	}
}

type charge struct {
	Account string `json:"account"`
	Cents   int64  `json:"cents"`
}

// A message whose handler gave up (here with txinbox.Permanent) is dead: kept with its last error,
// its key still taken. Once the cause is fixed, ReplayDead runs it again on the same row.
func ExampleAdmin_ReplayDead() {
	ctx := context.Background()
	db, schema, cleanup := testdb.ForExample()
	defer cleanup()
	store := txinbox.Store{DB: db, Schema: schema}
	client, err := inbox.New(store, inbox.Config{})
	if err != nil {
		panic(err)
	}
	ops, err := admin.New(store, admin.Config{})
	if err != nil {
		panic(err)
	}

	var accountOpened atomic.Bool   // the cause of the failure, fixed by an operator below
	charged := make(chan string, 1) // the handler's report, printed in order below
	handlers := worker.NewHandlers()
	worker.Handle(handlers, "Charge", func(ctx context.Context, tx pgx.Tx, m *worker.Message[charge]) error {
		if !accountOpened.Load() {
			return txinbox.Permanent(fmt.Errorf("no account %s", m.Payload.Account)) // no retry can help
		}
		charged <- fmt.Sprintf("charged %s %d, attempt %d, previous error %q",
			m.Payload.Account, m.Payload.Cents, m.Attempt, m.PreviousError)
		return nil
	})
	pool, err := worker.New(store, worker.Config{Consumer: "billing", Handlers: handlers})
	if err != nil {
		panic(err)
	}
	if err := pool.Start(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = pool.Stop(ctx) }()

	msg := inbox.Message{Consumer: "billing", Key: "charge-1", Kind: "Charge",
		Payload: []byte(`{"account": "acct-9", "cents": 500}`)}
	if _, err := client.Receive(ctx, msg); err != nil {
		panic(err)
	}
	var dead []txinbox.DeadLetter
	waitUntil(func() bool {
		dead, err = ops.ListDead(ctx, admin.DeadFilter{Consumer: "billing"})
		return err == nil && len(dead) == 1
	})
	d := dead[0]
	fmt.Println(d.Key, "dead after", d.AttemptsStarted, "attempt:", d.LastError)

	// While it is dead, a redelivery is a duplicate and does not run.
	r, _ := client.Receive(ctx, msg)
	fmt.Println("redelivered:", r.Outcome, r.State)

	accountOpened.Store(true)
	replayed, err := ops.ReplayDead(ctx, admin.Inbox, d.ID)
	if err != nil {
		panic(err)
	}
	fmt.Println("replayed:", len(replayed))
	fmt.Println(<-charged)
	waitUntil(func() bool {
		m, err := ops.GetMessage(ctx, d.ID)
		return err == nil && m.State == inbox.StateCompleted
	})
	// Output:
	// charge-1 dead after 1 attempt: permanent: no account acct-9
	// redelivered: duplicate dead
	// replayed: 1
	// charged acct-9 500, attempt 1, previous error "permanent: no account acct-9"
}
