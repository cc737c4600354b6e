package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/admin"
	"github.com/txinbox/txinbox/metrics"
	"github.com/txinbox/txinbox/outbox"
	"github.com/txinbox/txinbox/txinboxtest/outboxtest"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// Metrics counts a relay's recorded attempts by topic (sent, retried by reason, dead), and its
// outbox gauges report each topic's unsent events by state and the lag, as admin.Admin.OutboxStats
// counts them, on a real registry scraped over HTTP.
func TestOutboxMetrics(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	store := db.Store()
	m, err := metrics.New(store, metrics.Config{Registerer: reg, Topics: []string{"orders", "idle"}})
	if err != nil {
		t.Fatal(err)
	}
	store.Tracer = m

	fate := map[string]error{
		"refused": txinbox.Permanent(errors.New("no route")),
		"slow":    fmt.Errorf("broker: %w", context.DeadlineExceeded),
		"down":    errors.New("connection refused"),
	}
	msg := func(topic, what string) outbox.Message {
		return outbox.Message{Topic: topic, Payload: []byte(`{}`), Headers: map[string]string{"what": what}}
	}
	ids := outboxtest.Publish(t, db, msg("orders", "ok"), msg("orders", "ok"), msg("orders", "refused"), msg("orders", "slow"),
		msg("orders", "down"), msg("mail", "ok"))
	drain(t, db, store, func(ev outbox.Event) error { return fate[ev.Headers["what"]] })
	// The slow event was published an hour ago: the lag of orders.
	if _, err := db.Pool.Exec(ctx, db.SQL(`UPDATE {schema}.outbox SET created_at = now() - interval '1 hour' WHERE id = $1`), ids[3]); err != nil {
		t.Fatal(err)
	}
	outboxtest.Publish(t, db, msg("audit", "ok"))
	outboxtest.Hold(t, db, 1)
	outboxtest.Publish(t, db, msg("orders", "ok"))

	text := scrape(t, reg)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"txinbox_outbox_published_total", []string{"topic", "orders"}, 2},
		{"txinbox_outbox_published_total", []string{"topic", "mail"}, 1},
		{"txinbox_outbox_retries_total", []string{"topic", "orders", "reason", "timeout"}, 1},
		{"txinbox_outbox_retries_total", []string{"topic", "orders", "reason", "error"}, 1},
		{"txinbox_outbox_dead_total", []string{"topic", "orders"}, 1},
		{"txinbox_outbox_dead_total", []string{"topic", "mail"}, -1},
		{"txinbox_outbox_unsent_events", []string{"topic", "orders", "state", "pending"}, 1},
		{"txinbox_outbox_unsent_events", []string{"topic", "orders", "state", "retrying"}, 2},
		{"txinbox_outbox_unsent_events", []string{"topic", "orders", "state", "claimed"}, 0},
		{"txinbox_outbox_unsent_events", []string{"topic", "audit", "state", "claimed"}, 1},
		{"txinbox_outbox_unsent_events", []string{"topic", "idle", "state", "pending"}, 0},
		{"txinbox_outbox_unsent_events", []string{"topic", "mail"}, -1},
		{"txinbox_outbox_lag_seconds", []string{"topic", "idle"}, 0},
	} {
		if got := value(t, text, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	// The lag is admin's: the age of the oldest unsent event, an hour here.
	lag := value(t, text, "txinbox_outbox_lag_seconds", "topic", "orders")
	a, err := admin.New(db.Store(), admin.Config{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := a.OutboxStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		if s.Topic == "orders" && math.Abs(s.OldestUnsentAge.Seconds()-lag) > 60 {
			t.Errorf("lag of orders: %v s scraped, %v by admin.Admin.OutboxStats", lag, s.OldestUnsentAge)
		}
	}
	if lag < 3600 || lag > 3600+120 {
		t.Errorf("lag of orders: %v s, want about 3600", lag)
	}
	if lag := value(t, text, "txinbox_outbox_lag_seconds", "topic", "audit"); lag <= 0 || lag > 120 {
		t.Errorf("lag of audit: %v s, want the claimed event's age", lag)
	}
}

// A scrape of a schema without the outbox tables fails (the registry reports the error); an empty
// topic is a configuration error.
func TestOutboxCollectorErrors(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	reg := prometheus.NewRegistry()
	if _, err := metrics.New(txinbox.Store{DB: db.Pool, Schema: "txinbox_no_such_schema"}, metrics.Config{Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	if err := gatherErr(reg, "txinbox_outbox_unsent_events"); err == nil {
		t.Fatal("a scrape of a schema without the outbox tables succeeded")
	}
	var ce *txinbox.ConfigError
	reg2 := prometheus.NewRegistry()
	if _, err := metrics.New(db.Store(), metrics.Config{Registerer: reg2, Topics: []string{""}}); !errors.As(err, &ce) || ce.Field != "Topics" {
		t.Fatalf("empty topic: %v, want a *ConfigError of Topics", err)
	}
	if fs, _ := reg2.Gather(); len(fs) != 0 {
		t.Fatalf("a configuration error registered %d metrics", len(fs))
	}
}

// drain runs a relay of store (db's schema, with its Tracer) whose Publisher answers each event as
// fate says, until no event is claimed or due (as outboxtest.Drain, whose relays have no Tracer),
// then stops it.
func drain(t *testing.T, db *testdb.DB, store txinbox.Store, fate outboxtest.Fate) {
	t.Helper()
	pub := outbox.PublisherFunc(func(_ context.Context, events []outbox.Event) error {
		errs := make([]error, len(events))
		for i, ev := range events {
			errs[i] = fate(ev)
		}
		return outbox.Errors(errs)
	})
	idle := func() bool {
		return db.Count(t, `SELECT count(*) FROM {schema}.outbox_queue WHERE claimed OR run_at <= now()`) == 0
	}
	store.NotifyInterval = -1 // no LISTEN: the relay polls
	store.Logger = slog.New(slog.DiscardHandler)
	for first := true; first || !idle(); first = false {
		r, err := outbox.NewRelay(store, outbox.RelayConfig{Publisher: pub, Concurrency: 1, PollInterval: 10 * time.Millisecond,
			Backoff: txinbox.BackoffFunc(func(int) time.Duration { return time.Hour })})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		outboxtest.WaitFor(t, "the relay to leave no event claimed or due", idle)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err = r.Stop(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
}
