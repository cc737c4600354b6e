package webhook_test

import (
	"context"
	"log"
	"net/http"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/adapters"
	"github.com/txinbox/txinbox/adapters/webhook"
)

// Receive the webhooks of another service's outbox (a webhook.Publisher with the same secret) into
// the inbox of the consumer "billing": key, kind and ordering key come from the CloudEvents headers
// (ce-id, ce-type, ce-partitionkey), so the Sink needs no other setting. (Compiled, not run: it
// serves HTTP.)
func ExampleReceiver() {
	pool, _ := pgxpool.New(context.Background(), "postgres://app@localhost/app")
	rc, err := webhook.NewReceiver(webhook.ReceiverConfig{
		Secret: os.Getenv("WEBHOOK_SECRET"), // "whsec_...", the publisher's Config.Secret
		Sink:   adapters.SinkConfig{Store: txinbox.Store{DB: pool}, Consumer: "billing"},
	})
	if err != nil {
		log.Fatal(err)
	}
	http.Handle("POST /hooks/orders", rc) // a worker.Pool for "billing" applies the stored messages
	log.Fatal(http.ListenAndServe(":8080", nil))
}
