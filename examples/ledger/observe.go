package main

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/examples/ledger/internal/ledger"
	"github.com/txinbox/txinbox/metrics"
)

// observability is what serve exposes at GET /metrics: txinbox's metrics (package metrics: receives of
// POST /v1/events, worker attempts, the queue's depth, the tables' health, the outbox), the broker consumers' counts, and the Go
// runtime and process collectors, in a registry of its own.
type observability struct {
	reg     *prometheus.Registry
	metrics *metrics.Metrics
}

func newObservability(db txinbox.DB, schema string, srcs []*source) (*observability, error) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(txinbox.Store{DB: db, Schema: schema}, metrics.Config{Registerer: reg, Consumers: []string{ledger.Consumer}})
	if err != nil {
		return nil, err
	}
	for _, c := range []prometheus.Collector{brokerCollector(srcs),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return &observability{reg: reg, metrics: m}, nil
}

func (o *observability) handler(logger *slog.Logger) http.Handler {
	return promhttp.HandlerFor(o.reg, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelError), ErrorHandling: promhttp.ContinueOnError,
	})
}

// brokerCollector reports the adapters' counts. The adapters store through inbox clients of their
// own, so broker messages are counted here, not in txinbox_received_total (POST /v1/events only).
func brokerCollector(srcs []*source) prometheus.Collector {
	return collectorFunc{
		desc: []*prometheus.Desc{brokerRecords, brokerFailures},
		collect: func(ch chan<- prometheus.Metric) {
			for _, s := range srcs {
				st := s.c.Stats()
				for outcome, n := range map[string]int64{"inserted": st.Inserted, "duplicate": st.Duplicates,
					"conflict": st.Conflicts, "undecodable": st.Undecodable} {
					ch <- prometheus.MustNewConstMetric(brokerRecords, prometheus.CounterValue, float64(n), s.broker, outcome)
				}
				ch <- prometheus.MustNewConstMetric(brokerFailures, prometheus.CounterValue, float64(st.Failures), s.broker)
			}
		},
	}
}

var (
	brokerRecords = prometheus.NewDesc("ledger_broker_records_total",
		"Broker messages stored by the adapters, by outcome: inserted, duplicate (key already stored), conflict (key stored with another payload; dropped), undecodable (stored dead).",
		[]string{"broker", "outcome"}, nil)
	brokerFailures = prometheus.NewDesc("ledger_broker_failed_batches_total",
		"Batches of broker messages that could not be stored (database unreachable): not acknowledged, redelivered.",
		[]string{"broker"}, nil)
)

type collectorFunc struct {
	desc    []*prometheus.Desc
	collect func(chan<- prometheus.Metric)
}

func (c collectorFunc) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.desc {
		ch <- d
	}
}

func (c collectorFunc) Collect(ch chan<- prometheus.Metric) { c.collect(ch) }

// accessLog logs every request at debug level (--log-level debug).
func accessLog(logger *slog.Logger, h http.Handler) http.Handler {
	if !logger.Enabled(context.Background(), slog.LevelDebug) {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(sw, r)
		logger.Debug("http", "method", r.Method, "path", r.URL.Path, "status", sw.status, "duration", time.Since(start))
	})
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
