package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/internal/pgstats"
)

// HealthConfig configures a HealthCollector. The zero value is valid.
type HealthConfig struct {
	// Namespace prefixes the metric names. Default: "txinbox".
	Namespace string
	// ConstLabels are added to every metric. Default: none.
	ConstLabels prometheus.Labels
	// Timeout bounds the statements run by each scrape. Default: 5s.
	Timeout time.Duration
}

// Sources of the xmin horizon, the values of the label source of txinbox_xmin_horizon_age_xids and
// txinbox_xmin_horizon_age_seconds.
const (
	HorizonBackend         = "backend"          // the oldest snapshot of another session
	HorizonReplicationSlot = "replication_slot" // the oldest xmin or catalog_xmin of a replication slot
	HorizonPreparedXact    = "prepared_xact"    // the oldest prepared transaction
)

// HealthCollector reports, on every scrape, the dead row versions of the txinbox tables and the age of
// what holds back PostgreSQL's xmin horizon (the figures of admin.Health). Each scrape runs three
// statements on statistics views, whose cost does not grow with the tables. A failed statement is
// reported to the scrape as an error.
//
// The xmin horizon is the oldest transaction whose effects some snapshot may still need: vacuum keeps
// every row version deleted after it, in every table. A session left idle in a transaction, a
// forgotten prepared transaction or an inactive replication slot holds it back, and the queue table
// (every message inserts, claims and deletes a row in it) fills with dead row versions that every
// claim reads through. Alert on txinbox_xmin_horizon_age_seconds (minutes, not hours) and on
// txinbox_table_dead_rows of inbox_queue.
type HealthCollector struct {
	db              txinbox.DB
	schema          string
	cfg             HealthConfig
	live            *prometheus.Desc
	dead            *prometheus.Desc
	lastVacuum      *prometheus.Desc
	ageXids         *prometheus.Desc
	ageSeconds      *prometheus.Desc
	generation      *prometheus.Desc // the current generation (migration 00006)
	generationBegan *prometheus.Desc
}

// NewHealthCollector returns a collector of the health metrics of store (whose DB, a *pgxpool.Pool,
// say, runs the scrapes' statements; whose Schema says which tables), to register with a
// prometheus.Registerer. It returns a *[txinbox.ConfigError] if store is invalid.
func NewHealthCollector(store txinbox.Store, cfg HealthConfig) (*HealthCollector, error) {
	store, err := store.Resolve()
	if err != nil {
		return nil, err
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "txinbox"
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	desc := func(subsystem, name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(cfg.Namespace, subsystem, name), help, labels, cfg.ConstLabels)
	}
	return &HealthCollector{
		db: store.DB, schema: store.Schema, cfg: cfg,
		live: desc("table", "live_rows",
			"Estimated live rows of a txinbox table (pg_stat_all_tables.n_live_tup).", "table"),
		dead: desc("table", "dead_rows",
			"Estimated dead row versions of a txinbox table, not yet reclaimed by vacuum (n_dead_tup).", "table"),
		lastVacuum: desc("table", "last_vacuum_timestamp_seconds",
			"When a txinbox table was last vacuumed, by autovacuum or a VACUUM (Unix time; 0: never since the statistics began).", "table"),
		ageXids: desc("xmin_horizon", "age_xids",
			"Age in transaction ids of the oldest xmin held, by source: backend (another session's snapshot), replication_slot, prepared_xact; 0 when none.", "source"),
		generation: desc("", "generation",
			"The inbox's current generation (migration 00006); the schema's maintainer begins one every Retention.Generation of its Config."),
		generationBegan: desc("generation", "began_timestamp_seconds",
			"When the inbox's current generation began (Unix time): long ago means no rotation runs."),
		ageSeconds: desc("xmin_horizon", "age_seconds",
			"Age in seconds of the oldest transaction holding the xmin horizon, by source: backend (how long the transaction holding the oldest snapshot has been open; absent when the scraping role may not see it: grant it pg_read_all_stats), prepared_xact; 0 when none.", "source"),
	}, nil
}

// Describe implements prometheus.Collector.
func (c *HealthCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.live, c.dead, c.lastVacuum, c.ageXids, c.ageSeconds, c.generation, c.generationBegan} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *HealthCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Timeout)
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
	gauge(c.ageXids, float64(backendXids), HorizonBackend)
	gauge(c.ageXids, float64(hz.SlotXminAge), HorizonReplicationSlot)
	gauge(c.ageXids, float64(hz.PreparedXminAge), HorizonPreparedXact)
	if visible {
		gauge(c.ageSeconds, backendSeconds, HorizonBackend)
	}
	gauge(c.ageSeconds, hz.PreparedAge.Seconds(), HorizonPreparedXact)
}
