package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/internal/schemasql"
)

// QueueConfig configures a QueueCollector. The zero value is valid.
type QueueConfig struct {
	// Consumers are always reported, with zeros when they have nothing queued (so that their series
	// do not vanish when the queue drains). Other consumers are reported while they have messages
	// queued. Default: none.
	Consumers []string
	// Namespace prefixes the metric names. Default: "txinbox".
	Namespace string
	// ConstLabels are added to every metric. Default: none.
	ConstLabels prometheus.Labels
	// Timeout bounds the query run by each scrape. Default: 5s.
	Timeout time.Duration
}

// statements returns the statement rewriter of schema.
func statements(schema string) *schemasql.Schema { return schemasql.New(schema) }

// QueueCollector reports the depth of the queue on every scrape, with one query reading the queue
// table (inbox_queue: unfinished messages only, so its cost grows with the backlog, not with the
// history). A failed query is reported to the scrape as an error.
type QueueCollector struct {
	db       txinbox.DB
	cfg      QueueConfig
	st       *schemasql.Schema
	messages *prometheus.Desc
	oldest   *prometheus.Desc
}

// NewQueueCollector returns a collector of the queue metrics of store (whose DB, a *pgxpool.Pool,
// say, runs the scrapes' queries), to register with a prometheus.Registerer. It returns a
// *[txinbox.ConfigError] if store or a consumer name is invalid.
func NewQueueCollector(store txinbox.Store, cfg QueueConfig) (*QueueCollector, error) {
	store, err := store.Resolve()
	if err != nil {
		return nil, err
	}
	for _, c := range cfg.Consumers {
		if err := txinbox.ValidateName(c); err != nil {
			return nil, &txinbox.ConfigError{Field: "Consumers", Reason: err.Error()}
		}
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "txinbox"
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	return &QueueCollector{
		db: store.DB, cfg: cfg, st: statements(store.Schema),
		messages: prometheus.NewDesc(prometheus.BuildFQName(cfg.Namespace, "queue", "messages"),
			"Unfinished messages, by state: ready (runnable now), waiting (not before a later time: delayed, backing off, or behind their ordering key), claimed (running).",
			[]string{"consumer", "state"}, cfg.ConstLabels),
		oldest: prometheus.NewDesc(prometheus.BuildFQName(cfg.Namespace, "queue", "oldest_age_seconds"),
			"Age of the oldest unfinished message (0 when none).", []string{"consumer"}, cfg.ConstLabels),
	}, nil
}

// Describe implements prometheus.Collector.
func (c *QueueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.messages
	ch <- c.oldest
}

// Collect implements prometheus.Collector.
func (c *QueueCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Timeout)
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
	for _, consumer := range c.cfg.Consumers {
		if !seen[consumer] {
			seen[consumer] = true
			for _, s := range []string{"ready", "waiting", "claimed"} {
				gauge(c.messages, 0, consumer, s)
			}
			gauge(c.oldest, 0, consumer)
		}
	}
}
