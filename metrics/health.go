package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/internal/pgstats"
)

// Sources of the xmin horizon, the values of the label source of txinbox_xmin_horizon_age_xids and
// txinbox_xmin_horizon_age_seconds.
const (
	horizonBackend         = "backend"          // the oldest snapshot of another session
	horizonReplicationSlot = "replication_slot" // the oldest xmin or catalog_xmin of a replication slot
	horizonPreparedXact    = "prepared_xact"    // the oldest prepared transaction
)

// healthCollector reports, on every scrape, the dead row versions of the txinbox tables and the age
// of what holds back PostgreSQL's xmin horizon (the figures of admin.Health; see the package's
// documentation).
type healthCollector struct {
	db              txinbox.DB
	schema          string
	timeout         time.Duration
	live            *prometheus.Desc
	dead            *prometheus.Desc
	lastVacuum      *prometheus.Desc
	ageXids         *prometheus.Desc
	ageSeconds      *prometheus.Desc
	generation      *prometheus.Desc // the current generation (migration 00006)
	generationBegan *prometheus.Desc
}

// newHealthCollector returns the collector of the health gauges of store (resolved) with cfg
// (checked, its defaults applied).
func newHealthCollector(store txinbox.Store, cfg Config) *healthCollector {
	desc := func(subsystem, name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(cfg.Namespace, subsystem, name), help, labels, cfg.ConstLabels)
	}
	return &healthCollector{
		db: store.DB, schema: store.Schema, timeout: gaugeTimeout,
		live: desc("table", "live_rows",
			"Estimated live rows of a txinbox table (pg_stat_all_tables.n_live_tup).", "table"),
		dead: desc("table", "dead_rows",
			"Estimated dead row versions of a txinbox table, not yet reclaimed by vacuum (n_dead_tup).", "table"),
		lastVacuum: desc("table", "last_vacuum_timestamp_seconds",
			"When a txinbox table was last vacuumed, by autovacuum or a VACUUM (Unix time; 0: never since the statistics began).", "table"),
		ageXids: desc("xmin_horizon", "age_xids",
			"Age in transaction ids of the oldest xmin held, by source: backend (another session's snapshot), replication_slot, prepared_xact; 0 when none.", "source"),
		generation: desc("", "generation",
			"The inbox's current generation (migration 00006); the schema's maintainer begins one every Generation of its Config."),
		generationBegan: desc("generation", "began_timestamp_seconds",
			"When the inbox's current generation began (Unix time): long ago means no rotation runs."),
		ageSeconds: desc("xmin_horizon", "age_seconds",
			"Age in seconds of the oldest transaction holding the xmin horizon, by source: backend (how long the transaction holding the oldest snapshot has been open; absent when the scraping role may not see it: grant it pg_read_all_stats), prepared_xact; 0 when none.", "source"),
	}
}

// Describe implements prometheus.Collector.
func (c *healthCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.live, c.dead, c.lastVacuum, c.ageXids, c.ageSeconds, c.generation, c.generationBegan} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *healthCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	tables, err := pgstats.ReadTables(ctx, c.db, c.schema)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.dead, err)
	}
	for _, t := range tables {
		gauge(c.live, float64(t.LiveRows), t.Name)
		gauge(c.dead, float64(t.DeadRows), t.Name)
		last := t.LastVacuum
		if t.LastAutovacuum.After(last) {
			last = t.LastAutovacuum
		}
		v := 0.0
		if !last.IsZero() {
			v = float64(last.UnixNano()) / 1e9
		}
		gauge(c.lastVacuum, v, t.Name)
	}
	switch gen, err := pgstats.ReadGeneration(ctx, c.db, c.schema); {
	case err != nil:
		ch <- prometheus.NewInvalidMetric(c.generation, err)
	case gen != nil:
		gauge(c.generation, float64(gen.Number))
		gauge(c.generationBegan, float64(gen.BeganAt.UnixNano())/1e9)
	}
	hz, err := pgstats.ReadHorizon(ctx, c.db)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.ageXids, err)
		return
	}
	var backendXids int64
	backendSeconds, visible := 0.0, true
	if h := hz.Holder; h != nil {
		backendXids, backendSeconds, visible = h.XminAge, h.Age.Seconds(), !h.DetailsHidden
	}
	gauge(c.ageXids, float64(backendXids), horizonBackend)
	gauge(c.ageXids, float64(hz.SlotXminAge), horizonReplicationSlot)
	gauge(c.ageXids, float64(hz.PreparedXminAge), horizonPreparedXact)
	if visible {
		gauge(c.ageSeconds, backendSeconds, horizonBackend)
	}
	gauge(c.ageSeconds, hz.PreparedAge.Seconds(), horizonPreparedXact)
}
