package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/internal/schemasql"
)

// statements returns the statement rewriter of schema.
func statements(schema string) *schemasql.Schema { return schemasql.New(schema) }

// queueCollector reports the depth of the queue on every scrape (see the package's documentation).
type queueCollector struct {
	db        txinbox.DB
	timeout   time.Duration
	consumers []string // always reported
	st        *schemasql.Schema
	messages  *prometheus.Desc
	oldest    *prometheus.Desc
}

// newQueueCollector returns the collector of the queue gauges of store (resolved) with cfg (checked,
// its defaults applied).
func newQueueCollector(store txinbox.Store, cfg Config) *queueCollector {
	return &queueCollector{
		db: store.DB, timeout: gaugeTimeout, consumers: cfg.Consumers, st: statements(store.Schema),
		messages: prometheus.NewDesc(prometheus.BuildFQName(cfg.Namespace, "queue", "messages"),
			"Unfinished messages, by state: ready (runnable now), waiting (not before a later time: delayed, backing off, or behind their ordering key), claimed (running).",
			[]string{"consumer", "state"}, cfg.ConstLabels),
		oldest: prometheus.NewDesc(prometheus.BuildFQName(cfg.Namespace, "queue", "oldest_age_seconds"),
			"Age of the oldest unfinished message (0 when none).", []string{"consumer"}, cfg.ConstLabels),
	}
}

// Describe implements prometheus.Collector.
func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.messages
	ch <- c.oldest
}

// Collect implements prometheus.Collector.
func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	rows, err := schemasql.Queries.QueueStats(ctx, c.st.Wrap(c.db))
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.messages, err)
		return
	}
	seen := make(map[string]bool, len(rows))
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, r := range rows {
		seen[r.Consumer] = true
		gauge(c.messages, float64(r.Ready), r.Consumer, "ready")
		gauge(c.messages, float64(r.Waiting), r.Consumer, "waiting")
		gauge(c.messages, float64(r.Claimed), r.Consumer, "claimed")
		gauge(c.oldest, max(r.OldestAgeSeconds, 0), r.Consumer)
	}
	for _, consumer := range c.consumers {
		if !seen[consumer] {
			seen[consumer] = true
			for _, s := range []string{"ready", "waiting", "claimed"} {
				gauge(c.messages, 0, consumer, s)
			}
			gauge(c.oldest, 0, consumer)
		}
	}
}
