package retention_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/admin"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/retention"
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

// A completed message's row is its dedup record, kept for the Store's Retention (7 days by default;
// a millisecond here). The schema's maintainer, which every runner runs, retires the records whose
// window has ended, a generation at a time; Rotate does it by hand.
func ExampleRotate() {
	ctx := context.Background()
	db, schema, cleanup := testdb.ForExample()
	defer cleanup()
	store := txinbox.Store{DB: db, Schema: schema, Retention: time.Millisecond}
	client, err := inbox.New(store, inbox.Config{})
	if err != nil {
		panic(err)
	}
	handlers := worker.NewHandlers()
	worker.Handle(handlers, "Ping", func(context.Context, pgx.Tx, *worker.Message[struct{}]) error { return nil })
	// A pool runs no maintainer (a runner.Runner does, and would rotate every second with this
	// Retention): this example rotates by hand.
	pool, err := worker.New(store, worker.Config{Consumer: "audit", Handlers: handlers})
	if err != nil {
		panic(err)
	}
	if err := pool.Start(ctx); err != nil {
		panic(err)
	}
	for _, key := range []string{"p-1", "p-2", "p-3"} {
		if _, err := client.Receive(ctx, inbox.Message{Consumer: "audit", Key: key, Kind: "Ping", Payload: []byte(`{}`)}); err != nil {
			panic(err)
		}
	}
	ops, err := admin.New(store, admin.Config{})
	if err != nil {
		panic(err)
	}
	waitUntil(func() bool {
		s, err := ops.Stats(ctx)
		return err == nil && len(s) == 1 && s[0].Completed == 3 && s[0].Expired == 3
	})
	if err := pool.Stop(ctx); err != nil {
		panic(err)
	}

	// The maintainer rotates once per maintain.Config.Generation; Force rotates now. The first
	// rotation begins generation 1; the second retires generation 0, where the three messages are:
	// past their window, they are not kept.
	now := retention.RotateOptions{Force: true}
	if _, err := retention.Rotate(ctx, store, now); err != nil {
		panic(err)
	}
	rot, err := retention.Rotate(ctx, store, now)
	if err != nil {
		panic(err)
	}
	fmt.Printf("rotated: %v, generation: %d, kept: %d\n", rot.Rotated, rot.Generation, rot.Copied)
	stats, err := ops.Stats(ctx)
	fmt.Println("stored:", len(stats), err)

	// The window of p-1 has ended: a new delivery of the key is a new message.
	r, err := client.Receive(ctx, inbox.Message{Consumer: "audit", Key: "p-1", Kind: "Ping", Payload: []byte(`{}`)})
	fmt.Println("p-1 again:", r.Outcome, err)

	_, err = retention.Clean(ctx, store, retention.CleanOptions{BatchSize: -1})
	fmt.Println("bad options:", errors.Is(err, txinbox.ErrInvalidArgument))
	// Output:
	// rotated: true, generation: 2, kept: 0
	// stored: 0 <nil>
	// p-1 again: inserted <nil>
	// bad options: true
}
