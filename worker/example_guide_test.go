package worker_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/worker"
)

type invoice struct {
	Email string `json:"email"`
}

// The pool's Lease must exceed every handler's Timeout: the server ends a batch transaction left
// idle longer than the Lease, and a handler waiting outside the database leaves it idle for up to
// its Timeout. Unset, the Lease follows the longest Timeout (twice it, at least 1m); set, worker.New
// refuses a kind whose Timeout is not below it. (New touches no database: the pgxpool here never
// connects.)
func Example_leaseAndTimeout() {
	db, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:5432/postgres")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	store := txinbox.Store{DB: db, Schema: "billing"}

	handlers := func() *worker.Handlers {
		hs := worker.NewHandlers()
		worker.Handle(hs, "SendInvoice", func(ctx context.Context, tx pgx.Tx, m *worker.Message[invoice]) error {
			return nil
		}, worker.HandlerConfig{Timeout: 2 * time.Minute})
		return hs
	}

	_, err = worker.New(store, worker.Config{Consumer: "billing", Handlers: handlers()}) // Lease: 4m
	fmt.Println(err)

	_, err = worker.New(store, worker.Config{Consumer: "billing", Handlers: handlers(), Lease: time.Minute})
	fmt.Println(err)
	fmt.Println(errors.Is(err, txinbox.ErrInvalidConfig))
	// Output:
	// <nil>
	// txinbox: invalid configuration: Lease: 1m0s must exceed the timeout of kind "SendInvoice" (2m0s)
	// true
}
