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
// Observer of receiving and handling (and of publishing: outbox.RelayConfig.Observer), and the gauges
// read from the database on every scrape.
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
	client, err := inbox.New(store, inbox.Config{Observer: m})
	if err != nil {
		log.Fatal(err)
	}
	hs := worker.NewHandlers() // the handlers of ledger
	pool, err := worker.New(store, worker.Config{Consumer: "ledger", Handlers: hs, Observer: m})
	if err != nil {
		log.Fatal(err)
	}
	_, _ = client, pool
	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
}
