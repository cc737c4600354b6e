package metrics_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/metrics"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// TestHealthCollector scrapes the health metrics of a schema whose queue rows were deleted under a
// snapshot held open in another session: the dead rows and the horizon's age are reported.
func TestHealthCollector(t *testing.T) {
	t.Parallel()
	db := testdb.NewInDatabase(t) // the snapshot held below holds back the horizon of its database only
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	if _, err := metrics.New(db.Store(), metrics.Config{Registerer: reg, ConstLabels: prometheus.Labels{"service": "test"}}); err != nil {
		t.Fatal(err)
	}

	first := scrape(t, reg)
	for _, table := range []string{"idempotency_keys", "inbox", "inbox_dead", "inbox_queue", "inbox_rollup", "outbox", "outbox_queue"} {
		for _, name := range []string{"txinbox_table_live_rows", "txinbox_table_dead_rows", "txinbox_table_last_vacuum_timestamp_seconds"} {
			if v := value(t, first, name, "table", table, "service", "test"); v < 0 {
				t.Errorf("no %s{table=%q}:\n%s", name, table, first)
			}
		}
	}
	for _, source := range []string{"backend", "replication_slot", "prepared_xact"} {
		if v := value(t, first, "txinbox_xmin_horizon_age_xids", "source", source); v < 0 {
			t.Errorf("no txinbox_xmin_horizon_age_xids{source=%q}:\n%s", source, first)
		}
	}
	if v := value(t, first, "txinbox_generation", "service", "test"); v != 0 {
		t.Errorf("txinbox_generation = %v, want 0 before any rotation:\n%s", v, first)
	}
	if v := value(t, first, "txinbox_generation_began_timestamp_seconds", "service", "test"); v < float64(time.Now().Add(-time.Hour).Unix()) {
		t.Errorf("txinbox_generation_began_timestamp_seconds = %v, want the migration's time", v)
	}

	testdb.HoldSnapshot(t, db.URL)
	client, err := inbox.New(db.Store(), inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 30
	var msgs []inbox.Message
	for i := range n {
		msgs = append(msgs, inbox.Message{Consumer: "ledger", Key: fmt.Sprint("k-", i), Kind: "credit", Payload: []byte(`{"amount":1}`)})
	}
	if _, err := client.ReceiveMany(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, db.SQL(`DELETE FROM {schema}.inbox_queue`)); err != nil {
		t.Fatal(err)
	}
	// Statistics are reported within a second or so of the transactions' end.
	var text string
	deadline := time.Now().Add(2 * time.Minute)
	for {
		text = scrape(t, reg)
		if value(t, text, "txinbox_table_dead_rows", "table", "inbox_queue") >= n &&
			value(t, text, "txinbox_table_live_rows", "table", "inbox") >= n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %d dead queue rows and %d live inbox rows:\n%s", n, n, text)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The snapshot held holds the horizon: the deletes came after it.
	if v := value(t, text, "txinbox_xmin_horizon_age_xids", "source", "backend"); v < 1 {
		t.Errorf("txinbox_xmin_horizon_age_xids{source=backend} = %v with a snapshot held", v)
	}
	if v := value(t, text, "txinbox_xmin_horizon_age_seconds", "source", "backend"); v < 0 {
		t.Errorf("txinbox_xmin_horizon_age_seconds{source=backend} = %v (absent?) for a superuser", v)
	}
	if !strings.Contains(text, "# TYPE txinbox_xmin_horizon_age_seconds gauge") {
		t.Errorf("no gauge type for the horizon age:\n%s", text)
	}
}

// TestHealthCollectorErrors: a schema without the tables reports no table series (nothing to
// report), and a failing database makes the scrape fail rather than report zeros.
func TestHealthCollectorErrors(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	reg := prometheus.NewRegistry()
	if _, err := metrics.New(txinbox.Store{DB: db.Pool, Schema: "txinbox_no_such_schema"}, metrics.Config{Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	// The queue's and the outbox's gauges fail there (no tables to read); the health gauges do not.
	fs, _ := reg.Gather()
	for _, f := range fs {
		if f.GetName() == "txinbox_table_dead_rows" && len(f.GetMetric()) > 0 {
			t.Fatalf("table series for a schema without tables: %v", f)
		}
	}
	for _, name := range []string{"txinbox_table_dead_rows", "txinbox_generation", "txinbox_xmin_horizon_age_xids"} {
		if err := gatherErr(reg, name); err != nil {
			t.Fatalf("health gauges of a schema without tables: %v", err)
		}
	}
	if _, err := metrics.New(txinbox.Store{DB: db.Pool, Schema: "bad schema;"}, metrics.Config{Registerer: prometheus.NewRegistry()}); err == nil {
		t.Fatal("an invalid schema name was accepted")
	}
	closed := testdb.New(t)
	closed.Pool.Close()
	reg2 := prometheus.NewRegistry()
	if _, err := metrics.New(closed.Store(), metrics.Config{Registerer: reg2}); err != nil {
		t.Fatal(err)
	}
	if err := gatherErr(reg2, "txinbox_xmin_horizon_age_xids"); err == nil {
		t.Fatal("a scrape on a closed pool did not fail")
	}
}
