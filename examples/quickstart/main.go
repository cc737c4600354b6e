// Command quickstart is the README's quick start as a program you can run: it migrates the inbox
// tables, receives a few messages (some of them twice, as a broker redelivers), handles them with two
// handlers, and shuts down safely on SIGINT or SIGTERM: in-flight handlers finish and commit, up to a
// deadline.
//
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres go run ./examples/quickstart
//
// TXINBOX_SCHEMA names the schema for the inbox tables and the example's own table (default: public);
// TXINBOX_RETENTION the dedup window, Store.Retention (a Go duration such as 1m; default 7 days). The
// runner runs the schema's maintainer candidate, which begins a new generation of the inbox every
// Retention: completed messages leave their window, then the table, with no other line of code.
// Stop it with Ctrl-C.
package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/migrate"
	"github.com/txinbox/txinbox/runner"
	"github.com/txinbox/txinbox/worker"
)

// OrderPaid and OrderRefunded are the payloads of the two kinds of message.
type OrderPaid struct {
	OrderID     string `json:"order_id"`
	AmountCents int64  `json:"amount_cents"`
}

type OrderRefunded struct {
	OrderID string `json:"order_id"`
}

func main() {
	if err := run(); err != nil {
		slog.Error("quickstart", "err", err)
		os.Exit(1)
	}
}

func run() error {
	url := cmp.Or(os.Getenv("DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable")
	schema := cmp.Or(os.Getenv("TXINBOX_SCHEMA"), txinbox.DefaultSchema)
	retention, err := time.ParseDuration(cmp.Or(os.Getenv("TXINBOX_RETENTION"), "0s")) // 0: the default
	if err != nil {
		return err
	}

	// README:begin
	// The signal ends sigCtx; the worker pool runs on a ctx that outlives it, so that a SIGTERM lets
	// in-flight handlers finish instead of cancelling them.
	sigCtx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx := context.Background()

	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return err
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema // the example's own table lives there too
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}

	// 1. One Store says where the tables are (and the dedup window) for every component. Migrate once
	//    per process start (safe to run concurrently; goose with its own version table).
	store := txinbox.Store{DB: pool, Schema: schema, Retention: retention}
	if err := migrate.Up(ctx, store); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS credits (
		order_id text PRIMARY KEY, amount_cents bigint NOT NULL, refunded bool NOT NULL DEFAULT false)`); err != nil {
		return err
	}

	// 2. Receive: a message is stored once per (consumer, key); a redelivery is a Duplicate. Messages of
	//    one OrderingKey run one at a time, in the order received.
	client, err := inbox.New(store, inbox.Config{})
	if err != nil {
		return err
	}
	for _, m := range []inbox.Message{
		{Consumer: "billing", Key: "evt-1", Kind: "OrderPaid", Payload: []byte(`{"order_id": "o-1", "amount_cents": 500}`)},
		{Consumer: "billing", Key: "evt-1", Kind: "OrderPaid", Payload: []byte(`{"order_id": "o-1", "amount_cents": 500}`)},
		{Consumer: "billing", Key: "evt-2", Kind: "OrderPaid", OrderingKey: "o-2", Payload: []byte(`{"order_id": "o-2", "amount_cents": 700}`)},
		{Consumer: "billing", Key: "evt-3", Kind: "OrderRefunded", OrderingKey: "o-2", Payload: []byte(`{"order_id": "o-2"}`)},
	} {
		r, err := client.Receive(ctx, m)
		if err != nil {
			return err // a *inbox.KeyConflictError if the key came back with another payload
		}
		fmt.Println("received", m.Key, r.Outcome)
	}

	// 3. Handlers: the writes through tx and the message's "completed" mark commit together.
	handlers := worker.NewHandlers()
	worker.Handle(handlers, "OrderPaid", func(ctx context.Context, tx pgx.Tx, m *worker.Message[OrderPaid]) error {
		_, err := tx.Exec(ctx, `INSERT INTO credits (order_id, amount_cents) VALUES ($1, $2)`,
			m.Payload.OrderID, m.Payload.AmountCents)
		fmt.Println("handled", m.Key, "credit", m.Payload.OrderID, m.Payload.AmountCents)
		return err // an error rolls the insert back and retries the message later
	}, worker.HandlerConfig{MaxAttempts: 5, DisallowUnknownFields: true})
	worker.Handle(handlers, "OrderRefunded", func(ctx context.Context, tx pgx.Tx, m *worker.Message[OrderRefunded]) error {
		tag, err := tx.Exec(ctx, `UPDATE credits SET refunded = true WHERE order_id = $1`, m.Payload.OrderID)
		if err == nil && tag.RowsAffected() == 0 {
			return fmt.Errorf("order %s not credited yet", m.Payload.OrderID) // retried with backoff
		}
		fmt.Println("handled", m.Key, "refund", m.Payload.OrderID)
		return err
	})

	// 4. Run the pool until SIGINT/SIGTERM, then stop it with a deadline (below a Kubernetes grace period).
	//    The runner also keeps the tables bounded: it runs the schema's maintainer candidate (one per
	//    schema is elected), which retires completed messages once their Retention has passed.
	r, err := runner.New(store, runner.Config{Pools: []worker.Config{{Consumer: "billing", Handlers: handlers}}})
	if err != nil {
		return err
	}
	if err := r.Start(ctx); err != nil {
		return err // txinbox.ErrNotMigrated if the schema has no inbox tables
	}
	<-sigCtx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := r.Stop(stopCtx); err != nil {
		// A *worker.StopError: batches still running at the deadline were rolled back and their messages
		// handed back. Exit without pool.Close, which would wait for handlers that ignore their ctx.
		return err
	}
	pool.Close()
	// README:end
	fmt.Println("stopped")
	return nil
}
