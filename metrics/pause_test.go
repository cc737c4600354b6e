package metrics_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txinbox/txinbox/admin"
	"github.com/txinbox/txinbox/metrics"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// The pause gauge reports, on every scrape, each paused consumer and outbox topic with the time it
// was paused, and nothing once it is resumed.
func TestPausedGauge(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	if _, err := metrics.New(db.Store(), metrics.Config{Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	a, err := admin.New(db.Store(), admin.Config{})
	if err != nil {
		t.Fatal(err)
	}
	const name = "txinbox_paused_since_timestamp_seconds"
	if text := scrape(t, reg); strings.Contains(text, name+"{") {
		t.Fatalf("a pause gauge with nothing paused:\n%s", text)
	}
	before := float64(time.Now().Add(-time.Minute).Unix())
	if _, err := a.Pause(ctx, admin.Inbox, "ledger", "test", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Pause(ctx, admin.Outbox, "orders", "test", ""); err != nil {
		t.Fatal(err)
	}
	text := scrape(t, reg)
	for _, l := range [][]string{{"what", "consumer", "name", "ledger"}, {"what", "topic", "name", "orders"}} {
		if v := value(t, text, name, l...); v < before || v > float64(time.Now().Add(time.Minute).Unix()) || math.IsNaN(v) {
			t.Errorf("%s%v = %v, want about now", name, l, v)
		}
	}
	if _, err := a.Resume(ctx, admin.Inbox, "ledger"); err != nil {
		t.Fatal(err)
	}
	text = scrape(t, reg)
	if strings.Contains(text, `name="ledger"`) || !strings.Contains(text, `name="orders"`) {
		t.Errorf("after resuming ledger:\n%s", text)
	}
}
