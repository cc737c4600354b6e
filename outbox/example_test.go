package outbox_test

import (
	"context"
	"fmt"
	"slices"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/outbox"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// A service writes its events in its own transaction; a relay hands the committed ones to a
// Publisher (here a fake one that prints them; a broker adapter in a real service). The events of
// key order-1 go one at a time, in the order they were published; order-2's event goes alongside
// the first of them, in the same Publish call. Every event is handed over under the id Publish
// returned, which the Publisher sends as the idempotency key downstream.
func Example() {
	pool, schema, cleanup := testdb.ForExample()
	defer cleanup()
	ctx := context.Background()
	st := txinbox.Store{DB: pool, Schema: schema}

	client, err := outbox.New(st, outbox.Config{})
	if err != nil {
		panic(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		panic(err)
	}
	// ... the service's own writes in tx ...
	ids, err := client.Publish(ctx, tx,
		outbox.Message{Topic: "order.created", Key: "order-1", Payload: []byte(`{"total":42}`)},
		outbox.Message{Topic: "order.paid", Key: "order-1", Payload: []byte(`{"total":42}`)},
		outbox.Message{Topic: "invoice.sent", Key: "order-2", Payload: []byte(`{"invoice":7}`)},
	)
	if err != nil {
		panic(err)
	}
	if err := tx.Commit(ctx); err != nil { // the events exist from here on, with the writes
		panic(err)
	}

	done := make(chan struct{})
	calls := 0
	relay, err := outbox.NewRelay(st, outbox.RelayConfig{
		Concurrency: 1,
		Publisher: outbox.PublisherFunc(func(ctx context.Context, events []outbox.Event) error {
			calls++
			for _, ev := range events {
				i := slices.Index(ids, ev.ID)
				fmt.Printf("call %d: %s %s %s (id of message %d, attempt %d)\n", calls, ev.Topic, ev.Key, ev.Payload, i, ev.Attempt)
			}
			if calls == 2 {
				close(done)
			}
			return nil // every event acknowledged: marked sent, never handed over again
		}),
	})
	if err != nil {
		panic(err)
	}
	if err := relay.Start(ctx); err != nil {
		panic(err)
	}
	<-done
	if err := relay.Stop(ctx); err != nil {
		panic(err)
	}
	// Output:
	// call 1: order.created order-1 {"total":42} (id of message 0, attempt 1)
	// call 1: invoice.sent order-2 {"invoice":7} (id of message 2, attempt 1)
	// call 2: order.paid order-1 {"total":42} (id of message 1, attempt 1)
}
