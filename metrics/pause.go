package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/internal/schemasql"
)

// pauseCollector reports, on every scrape, what is paused (package admin's Pause): one gauge per
// paused consumer or outbox topic.
type pauseCollector struct {
	db      txinbox.DB
	timeout time.Duration
	st      *schemasql.Schema
	since   *prometheus.Desc
}

// newPauseCollector returns the collector of the pause gauge of store (resolved) with cfg.
func newPauseCollector(store txinbox.Store, cfg Config) *pauseCollector {
	return &pauseCollector{db: store.DB, timeout: gaugeTimeout, st: statements(store.Schema),
		since: prometheus.NewDesc(prometheus.BuildFQName(cfg.Namespace, "", "paused_since_timestamp_seconds"),
			"When a paused consumer (what=consumer) or outbox topic (what=topic) was paused, Unix time: nothing of it is claimed until it is resumed. Absent when not paused.",
			[]string{"what", "name"}, cfg.ConstLabels)}
}

// Describe implements prometheus.Collector.
func (c *pauseCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.since }

// Collect implements prometheus.Collector.
func (c *pauseCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	db := c.st.Wrap(c.db)
	consumers, err := schemasql.Queries.ListPausedConsumers(ctx, db)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.since, err)
		return
	}
	topics, err := schemasql.Queries.ListPausedTopics(ctx, db)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.since, err)
		return
	}
	at := func(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
	for _, p := range consumers {
		ch <- prometheus.MustNewConstMetric(c.since, prometheus.GaugeValue, at(p.PausedAt.Time), "consumer", p.Consumer)
	}
	for _, p := range topics {
		ch <- prometheus.MustNewConstMetric(c.since, prometheus.GaugeValue, at(p.PausedAt.Time), "topic", p.Topic)
	}
}
