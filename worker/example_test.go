package worker_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
	"github.com/txinbox/txinbox/worker"
)

type OrderPaid struct {
	OrderID     string `json:"order_id"`
	AmountCents int64  `json:"amount_cents"`
}

// A message delivered three times is stored once and handled once; the handler's write and the
// message's "completed" mark commit in one transaction.
func Example() {
	ctx := context.Background()
	db, schema, cleanup := testdb.ForExample() // a *pgxpool.Pool on a migrated schema
	defer cleanup()
	_, _ = db.Exec(ctx, "CREATE TABLE "+pgx.Identifier{schema, "credits"}.Sanitize()+" (order_id text PRIMARY KEY, cents bigint)")

	client, err := inbox.New(txinbox.Store{DB: db, Schema: schema}, inbox.Config{})
	if err != nil {
		panic(err)
	}
	for range 3 { // a broker redelivering
		r, err := client.Receive(ctx, inbox.Message{
			Consumer: "ledger", Key: "evt-1", Kind: "OrderPaid",
			Payload: []byte(`{"order_id": "o-1", "amount_cents": 500}`),
		})
		if err != nil {
			panic(err)
		}
		fmt.Println(r.Outcome)
	}

	handled := make(chan struct{})
	handlers := worker.NewHandlers()
	worker.Handle(handlers, "OrderPaid", func(ctx context.Context, tx pgx.Tx, m *worker.Message[OrderPaid]) error {
		_, err := tx.Exec(ctx, "INSERT INTO "+pgx.Identifier{schema, "credits"}.Sanitize()+" VALUES ($1, $2)",
			m.Payload.OrderID, m.Payload.AmountCents)
		fmt.Println("credited", m.Payload.OrderID, m.Payload.AmountCents, "attempt", m.Attempt)
		close(handled)
		return err
	})
	pool, err := worker.New(txinbox.Store{DB: db, Schema: schema}, worker.Config{Consumer: "ledger", Handlers: handlers})
	if err != nil {
		panic(err)
	}
	if err := pool.Start(ctx); err != nil {
		panic(err)
	}
	<-handled
	if err := pool.Stop(ctx); err != nil {
		panic(err)
	}

	r, _ := client.Receive(ctx, inbox.Message{Consumer: "ledger", Key: "evt-1", Kind: "OrderPaid",
		Payload: []byte(`{"order_id": "o-1", "amount_cents": 500}`)})
	fmt.Println(r.Outcome, r.State)
	// Output:
	// inserted
	// duplicate
	// duplicate
	// credited o-1 500 attempt 1
	// duplicate completed
}
