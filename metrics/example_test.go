package metrics_test

import (
	"context"
	"log"
	"net/http"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/metrics"
	"github.com/txinbox/txinbox/worker"
)

// New registers every metric of a Store: the counters, which the Metrics it returns keeps as the
// Store's Tracer (told about receiving, handling, relaying and the maintainer by every component made
// from that Store), and the gauges read from the database on every scrape.
func Example() {
	ctx := context.Background()
	db, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	store := txinbox.Store{DB: db, Schema: "billing"} // the Store of every part
	reg := prometheus.NewRegistry()
	m, err := metrics.New(store, metrics.Config{Registerer: reg, Consumers: []string{"ledger"}})
	if err != nil {
		log.Fatal(err)
	}
	store.Tracer = m // or txinbox.Tracers(otelTracer, m): spans and metrics
	client, err := inbox.New(store, inbox.Config{})
	if err != nil {
		log.Fatal(err)
	}
	hs := worker.NewHandlers() // the handlers of ledger
	pool, err := worker.New(store, worker.Config{Consumer: "ledger", Handlers: hs})
	if err != nil {
		log.Fatal(err)
	}
	_, _ = client, pool
	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
}
