package rabbitmq_test

import (
	"context"
	"log"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox/adapters"
	"github.com/txinbox/txinbox/adapters/rabbitmq"
)

// Consume the queue "payments" into the inbox of the consumer "ledger". Deliveries carry their key in
// the message-id property and their kind in the type property. (Compiled, not run: it needs a broker.)
func Example() {
	ctx := context.Background()
	pool, _ := pgxpool.New(ctx, "postgres://app@localhost/app")
	c, err := rabbitmq.New(rabbitmq.Config{
		URL:   "amqp://guest:guest@localhost:5672/",
		Queue: "payments",
		Sink:  adapters.SinkConfig{DB: pool, Consumer: "ledger"},
	})
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(c.Run(ctx)) // until ctx ends; a worker.Pool for "ledger" applies the messages
}
