package main

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/txinbox/txinbox/examples/ledger/internal/ledger"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/metrics"
)

// observability is what serve exposes at GET /metrics: txinbox's metrics (package metrics: receives of
// POST /v1/events, worker attempts, the queue's depth), and the Go runtime and process collectors, in
// a registry of its own.
type observability struct {
	reg     *prometheus.Registry
	metrics *metrics.Metrics
}

func newObservability(db inbox.DB, schema string) (*observability, error) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(metrics.Config{Registerer: reg})
	if err != nil {
		return nil, err
	}
	qc, err := metrics.NewQueueCollector(db, metrics.QueueConfig{Schema: schema, Consumers: []string{ledger.Consumer}})
	if err != nil {
		return nil, err
	}
	for _, c := range []prometheus.Collector{qc,
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
