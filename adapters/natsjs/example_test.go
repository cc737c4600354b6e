package natsjs_test

import (
	"context"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/adapters"
	"github.com/txinbox/txinbox/adapters/natsjs"
	"github.com/txinbox/txinbox/outbox"
)

// Consume the durable consumer "ledger" of the stream PAYMENTS into the inbox. Messages carry their
// key, kind and ordering key in a CloudEvents envelope (ce-id, ce-type, ce-partitionkey: every
// natsjs.Publisher's), or their key in Nats-Msg-Id or x-idempotency-key and their kind in x-kind.
// (Compiled, not run: it needs a server.)
func Example() {
	ctx := context.Background()
	pool, _ := pgxpool.New(ctx, "postgres://app@localhost/app")
	nc, _ := nats.Connect(nats.DefaultURL)
	js, _ := jetstream.New(nc)
	cons, _ := js.CreateOrUpdateConsumer(ctx, "PAYMENTS", jetstream.ConsumerConfig{Durable: "ledger", AckPolicy: jetstream.AckExplicitPolicy})
	c, err := natsjs.New(natsjs.Config{Consumer: cons, Sink: adapters.SinkConfig{Store: txinbox.Store{DB: pool}, Consumer: "ledger"}})
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		log.Fatal(err)
	}
	// Consume until SIGTERM, then let the batch in hand finish (a worker.Pool for "ledger" applies
	// the stored messages).
	sig, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	defer stop()
	<-sig.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Stop(stopCtx); err != nil {
		log.Print(err)
	}
}

// Publish the events of the service's outbox to JetStream, each on the subject "events." followed
// by its topic (the stream EVENTS captures "events.>"); the relay marks an event sent once JetStream
// acknowledged it. (Compiled, not run: it needs a server.)
func ExamplePublisher() {
	ctx := context.Background()
	pool, _ := pgxpool.New(ctx, "postgres://app@localhost/app")
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	js, _ := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(natsjs.DefaultAckTimeout))
	pub, err := natsjs.NewPublisher(natsjs.PublisherConfig{
		JetStream:    js,
		Subject:      func(ev outbox.Event) string { return "events." + ev.Topic },
		ExpectStream: "EVENTS",
	})
	if err != nil {
		log.Fatal(err)
	}
	relay, err := outbox.NewRelay(txinbox.Store{DB: pool}, outbox.RelayConfig{Publisher: pub})
	if err != nil {
		log.Fatal(err)
	}
	if err := relay.Start(context.Background()); err != nil {
		log.Fatal(err)
	}
	sig, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	defer stop()
	<-sig.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := relay.Stop(stopCtx); err != nil {
		log.Print(err)
	}
	nc.Close() // after the relay stopped
}
