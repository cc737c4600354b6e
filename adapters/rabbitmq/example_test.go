package rabbitmq_test

import (
	"context"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/adapters"
	"github.com/txinbox/txinbox/adapters/rabbitmq"
	"github.com/txinbox/txinbox/outbox"
)

// Consume the queue "payments" into the inbox of the consumer "ledger". Deliveries carry their key,
// kind and ordering key in a CloudEvents envelope (cloudEvents_id, cloudEvents_type,
// cloudEvents_partitionkey: every rabbitmq.Publisher's), or their key in the message-id property and
// their kind in the type property. (Compiled, not run: it needs a broker.)
func Example() {
	ctx := context.Background()
	pool, _ := pgxpool.New(ctx, "postgres://app@localhost/app")
	c, err := rabbitmq.New(rabbitmq.Config{
		URL:   "amqp://guest:guest@localhost:5672/",
		Queue: "payments",
		Sink:  adapters.SinkConfig{Store: txinbox.Store{DB: pool}, Consumer: "ledger"},
	})
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

// Publish the events of the service's outbox to the topic exchange "events", with each event's topic
// as its routing key; the relay marks an event sent once the broker confirmed its message.
// (Compiled, not run: it needs a broker.)
func ExamplePublisher() {
	ctx := context.Background()
	pool, _ := pgxpool.New(ctx, "postgres://app@localhost/app")
	pub, err := rabbitmq.NewPublisher(rabbitmq.PublisherConfig{
		URL:      "amqp://guest:guest@localhost:5672/",
		Exchange: "events",
		Setup: func(ch *amqp.Channel) error {
			return ch.ExchangeDeclare("events", "topic", true, false, false, false, nil)
		},
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
	_ = pub.Close() // after the relay stopped
}
