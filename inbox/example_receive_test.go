package inbox_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/admin"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// ReceiveTx stores a message in the caller's own transaction, so that a service accepts it
// atomically with its own writes: both commit, or neither is kept.
func ExampleClient_ReceiveTx() {
	ctx := context.Background()
	db, schema, cleanup := testdb.ForExample() // a *pgxpool.Pool on a migrated schema
	defer cleanup()
	orders := pgx.Identifier{schema, "orders"}.Sanitize()
	if _, err := db.Exec(ctx, "CREATE TABLE "+orders+" (id text PRIMARY KEY)"); err != nil {
		panic(err)
	}
	store := txinbox.Store{DB: db, Schema: schema}
	client, err := inbox.New(store, inbox.Config{})
	if err != nil {
		panic(err)
	}
	ops, err := admin.New(store, admin.Config{}) // reads stored messages
	if err != nil {
		panic(err)
	}

	// accept writes the order and stores its message in one transaction, then commits or rolls back.
	accept := func(orderID string, commit bool) inbox.Receipt {
		tx, err := db.Begin(ctx)
		if err != nil {
			panic(err)
		}
		defer func() { _ = tx.Rollback(ctx) }() // a no-op after Commit
		if _, err := tx.Exec(ctx, "INSERT INTO "+orders+" VALUES ($1)", orderID); err != nil {
			panic(err)
		}
		r, err := client.ReceiveTx(ctx, tx, inbox.Message{
			Consumer: "shipping", Key: "order-created:" + orderID, Kind: "OrderCreated",
			Payload: []byte(`{"order_id": "` + orderID + `"}`),
		})
		if err != nil {
			panic(err)
		}
		if commit {
			if err := tx.Commit(ctx); err != nil {
				panic(err)
			}
		}
		return r
	}

	r1 := accept("o-1", true)
	fmt.Println("o-1:", r1.Outcome, r1.State, "(committed)")
	r2 := accept("o-2", false)
	fmt.Println("o-2:", r2.Outcome, r2.State, "(rolled back)")

	// The rollback took the message with the order: nothing is stored, and no worker ever sees it.
	_, err = ops.GetMessage(ctx, r2.ID)
	fmt.Println("o-2 message stored:", !errors.Is(err, admin.ErrNotFound))
	var n int
	if err := db.QueryRow(ctx, "SELECT count(*) FROM "+orders).Scan(&n); err != nil {
		panic(err)
	}
	fmt.Println("orders stored:", n)

	// So its key is free: the retry of the whole request stores it.
	r2 = accept("o-2", true)
	fmt.Println("o-2:", r2.Outcome, "(retried, committed)")
	// Output:
	// o-1: inserted pending (committed)
	// o-2: inserted pending (rolled back)
	// o-2 message stored: false
	// orders stored: 1
	// o-2: inserted (retried, committed)
}

// ReceiveMany stores a batch in one statement and gives a receipt per message, in order. A
// redelivery is a Duplicate; a key reused with another payload is a Conflict, reported in its
// receipt without failing the batch, and the stored message is left as it was.
func ExampleClient_ReceiveMany() {
	ctx := context.Background()
	db, schema, cleanup := testdb.ForExample()
	defer cleanup()
	store := txinbox.Store{DB: db, Schema: schema}
	client, err := inbox.New(store, inbox.Config{})
	if err != nil {
		panic(err)
	}
	ops, err := admin.New(store, admin.Config{}) // reads stored messages
	if err != nil {
		panic(err)
	}
	paid := func(key, payload string) inbox.Message {
		return inbox.Message{Consumer: "ledger", Key: key, Kind: "OrderPaid", Payload: []byte(payload)}
	}
	if _, err := client.Receive(ctx, paid("evt-1", `{"amount_cents": 500}`)); err != nil {
		panic(err)
	}

	rs, err := client.ReceiveMany(ctx, []inbox.Message{
		paid("evt-1", `{ "amount_cents" : 500 }`), // redelivered: same JSON document, other spacing
		paid("evt-2", `{"amount_cents": 700}`),    // new
		paid("evt-1", `{"amount_cents": 999}`),    // same key, another payload: a producer bug
		paid("evt-2", `{"amount_cents": 700}`),    // repeated within the batch
	})
	if err != nil {
		panic(err) // an invalid message or a database error: nothing was written
	}
	for i, r := range rs {
		fmt.Println(i, r.Outcome, r.State, errors.Is(r.Err, inbox.ErrKeyConflict))
	}

	var conflict *inbox.KeyConflictError
	if errors.As(rs[2].Err, &conflict) {
		m, err := ops.GetMessage(ctx, conflict.ID)
		if err != nil {
			panic(err)
		}
		fmt.Println("stored for", conflict.Key+":", string(m.Payload))
	}
	// Output:
	// 0 duplicate pending false
	// 1 inserted pending false
	// 2 conflict pending true
	// 3 duplicate pending false
	// stored for evt-1: {"amount_cents": 500}
}
