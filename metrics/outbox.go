package metrics

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/internal/schemasql"
)

// outboxCounters are the counters of the outbox's relays (txinbox.OpRelayed).
type outboxCounters struct {
	published *prometheus.CounterVec
	retries   *prometheus.CounterVec
	dead      *prometheus.CounterVec
}

// register creates the outbox's counters and registers them with reg.
func (c *outboxCounters) register(reg prometheus.Registerer, namespace string, constLabels prometheus.Labels) error {
	opts := func(name, help string) prometheus.CounterOpts {
		return prometheus.CounterOpts{Namespace: namespace, Subsystem: "outbox", Name: name, Help: help, ConstLabels: constLabels}
	}
	c.published = prometheus.NewCounterVec(opts("published_total",
		"Outbox events sent: acknowledged by a relay's Publisher, and recorded."), []string{"topic"})
	c.retries = prometheus.NewCounterVec(opts("retries_total",
		"Failed attempts to publish an outbox event that will be retried, by reason: timeout (the Publish call ran out of time) or error."),
		[]string{"topic", "reason"})
	c.dead = prometheus.NewCounterVec(opts("dead_total",
		"Outbox events given up (dead): refused with a permanent error, or out of attempts."), []string{"topic"})
	for _, col := range []prometheus.Collector{c.published, c.retries, c.dead} {
		if err := reg.Register(col); err != nil {
			return fmt.Errorf("txinbox metrics: %w", err)
		}
	}
	return nil
}

// relayed counts a recorded attempt of a relay (txinbox.OpRelayed) by its outcome (sent, retry with
// its reason, dead) and its event's topic.
func (m *Metrics) relayed(s txinbox.TraceStart, d txinbox.TraceEnd) {
	var topic string
	if len(s.Messages) > 0 {
		topic = s.Messages[0].Topic
	}
	switch d.Outcome {
	case txinbox.OutcomeSent:
		m.outbox.published.WithLabelValues(topic).Inc()
	case txinbox.OutcomeRetry:
		reason := "error"
		if errors.Is(d.Err, context.DeadlineExceeded) {
			reason = "timeout"
		}
		m.outbox.retries.WithLabelValues(topic, reason).Inc()
	case txinbox.OutcomeDead:
		m.outbox.dead.WithLabelValues(topic).Inc()
	}
}

// outboxCollector reports the outbox's unsent events and its lag per topic on every scrape (see the
// package's documentation).
type outboxCollector struct {
	db      txinbox.DB
	timeout time.Duration
	topics  []string // always reported
	st      *schemasql.Schema
	events  *prometheus.Desc
	lag     *prometheus.Desc
}

// newOutboxCollector returns the collector of the outbox gauges of store (resolved) with cfg
// (checked, its defaults applied).
func newOutboxCollector(store txinbox.Store, cfg Config) *outboxCollector {
	return &outboxCollector{
		db: store.DB, timeout: gaugeTimeout, topics: cfg.Topics, st: statements(store.Schema),
		events: prometheus.NewDesc(prometheus.BuildFQName(cfg.Namespace, "outbox", "unsent_events"),
			"Outbox events not sent yet and not dead, by state: pending (waiting, never claimed), retrying (waiting, claimed before: failed, handed back or replayed), claimed (held by a relay).",
			[]string{"topic", "state"}, cfg.ConstLabels),
		lag: prometheus.NewDesc(prometheus.BuildFQName(cfg.Namespace, "outbox", "lag_seconds"),
			"Age of the oldest unsent outbox event: since it was published, or since its NotBefore if it was never claimed (0 when none; events whose NotBefore is ahead are not counted).",
			[]string{"topic"}, cfg.ConstLabels),
	}
}

// Describe implements prometheus.Collector.
func (c *outboxCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.events
	ch <- c.lag
}

// Collect implements prometheus.Collector.
func (c *outboxCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	rows, err := schemasql.Queries.OutboxQueueStats(ctx, c.st.Wrap(c.db))
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.events, err)
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	seen := make(map[string]bool, len(rows))
	for _, r := range rows {
		seen[r.Topic] = true
		gauge(c.events, float64(r.Pending), r.Topic, "pending")
		gauge(c.events, float64(r.Retrying), r.Topic, "retrying")
		gauge(c.events, float64(r.Claimed), r.Topic, "claimed")
		gauge(c.lag, max(r.OldestUnsentSeconds, 0), r.Topic)
	}
	for _, tp := range c.topics {
		if !seen[tp] {
			seen[tp] = true
			for _, s := range []string{"pending", "retrying", "claimed"} {
				gauge(c.events, 0, tp, s)
			}
			gauge(c.lag, 0, tp)
		}
	}
}
