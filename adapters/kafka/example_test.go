package kafka_test

import (
	"context"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/adapters"
	"github.com/txinbox/txinbox/adapters/kafka"
	"github.com/txinbox/txinbox/outbox"
)

// Consume the topic "payments" as a member of the group "ledger" into the inbox. Records carry their
// key, kind and ordering key in a CloudEvents envelope (ce_id, ce_type, ce_partitionkey: every
// kafka.Publisher's), or their key in x-idempotency-key (else their coordinates
// topic:partition:offset are the key) and their kind in x-kind, or default to "PaymentReceived".
// (Compiled, not run: it needs a cluster.)
func Example() {
	ctx := context.Background()
	pool, _ := pgxpool.New(ctx, "postgres://app@localhost/app")
	c, err := kafka.New(kafka.Config{
		Options: []kgo.Opt{kgo.SeedBrokers("localhost:9092"), kgo.ConsumerGroup("ledger"), kgo.ConsumeTopics("payments")},
		Sink:    adapters.SinkConfig{Store: txinbox.Store{DB: pool}, Consumer: "ledger", DefaultKind: "PaymentReceived"},
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

// Publish the events of the service's outbox to Kafka, each to the topic named by its topic, keyed by
// its Key, with its id in the x-idempotency-key header; the relay marks an event sent once the
// cluster acknowledged its record. (Compiled, not run: it needs a cluster.)
func ExamplePublisher() {
	ctx := context.Background()
	pool, _ := pgxpool.New(ctx, "postgres://app@localhost/app")
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{Options: []kgo.Opt{kgo.SeedBrokers("localhost:9092")}})
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
	pub.Close() // after the relay stopped
}
