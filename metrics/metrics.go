// Package metrics exposes txinbox activity as Prometheus metrics.
//
// One Metrics value observes every side: give it to inbox.Config.Observer (receiving),
// worker.Config.Observer (handling; a pool passes it on to the schema's maintainer it starts, or give
// it to maintain.Config.Observer) and outbox.RelayConfig.Observer (publishing), and register a
// QueueCollector for the queue's depth, a HealthCollector for the tables' dead row versions and the
// xmin horizon, and an OutboxCollector for the outbox's unsent events and lag, all on the same
// txinbox.Store (its Schema above all: a collector given another one reads another schema's tables):
//
//	store := txinbox.Store{DB: pool, Schema: "billing"}
//	reg := prometheus.NewRegistry()
//	m, err := metrics.New(metrics.Config{Registerer: reg})
//	client, err := inbox.New(store, inbox.Config{Observer: m})
//	pool, err := worker.New(store, worker.Config{Consumer: "ledger", Handlers: hs, Observer: m})
//	qc, err := metrics.NewQueueCollector(store, metrics.QueueConfig{Consumers: []string{"ledger"}})
//	hc, err := metrics.NewHealthCollector(store, metrics.HealthConfig{})
//	relay, err := outbox.NewRelay(store, outbox.RelayConfig{Publisher: pub, Observer: m})
//	oc, err := metrics.NewOutboxCollector(store, metrics.OutboxConfig{})
//	reg.MustRegister(qc, hc, oc)
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// The metrics (with the default namespace "txinbox"):
//
//	txinbox_received_total{consumer, outcome}               counter: messages received; outcome is
//	                                                         inserted, duplicate or conflict
//	txinbox_receive_errors_total                             counter: receive calls that failed (invalid
//	                                                         message, database error)
//	txinbox_processed_total{consumer, kind, outcome}         counter: attempts finished; outcome is
//	                                                         completed, retry or dead
//	txinbox_retries_total{consumer, kind, reason}            counter: failed attempts to be retried
//	txinbox_dead_letters_total{consumer, kind, reason}       counter: messages given up (dead)
//	txinbox_handler_duration_seconds{consumer, kind, outcome} histogram: time in the handler
//	txinbox_seen_cache_total{consumer, result}              counter: received messages by what the
//	                                                         seen-key cache did (inbox.Config.SeenCache):
//	                                                         hit, miss, mismatch or fallback (the cache
//	                                                         failed or timed out: sent to the database)
//	txinbox_seen_cache_errors_total{op}                      counter: seen-key cache errors and timeouts,
//	                                                         by operation: get, put or invalidate
//	txinbox_unfinished_batches_total{consumer}               counter: batches that never finished (crashes),
//	                                                         charged once each, isolation rounds included
//	txinbox_takeovers_total{consumer, alone}                 counter: groups of their messages taken over
//	txinbox_taken_over_messages_total{consumer}              counter: messages in those groups
//	txinbox_maintainer_leader{schema, owner}                 gauge: 1 while this process's maintainer
//	                                                         (owner) leads the schema's maintenance, 0
//	                                                         once it stopped (package maintain); summed
//	                                                         over all processes: 1
//	txinbox_maintenance_runs_total{schema, job, outcome}     counter: runs of maintenance jobs by this
//	                                                         process's leader; outcome is ok or error
//	txinbox_queue_messages{consumer, state}                  gauge (QueueCollector): queued messages;
//	                                                         state is ready, waiting or claimed
//	txinbox_queue_oldest_age_seconds{consumer}               gauge (QueueCollector): age of the oldest
//	                                                         queued (unfinished) message
//	txinbox_table_live_rows{table}                           gauge (HealthCollector): estimated live rows
//	                                                         of each txinbox table
//	txinbox_table_dead_rows{table}                           gauge (HealthCollector): estimated dead row
//	                                                         versions not yet reclaimed by vacuum
//	txinbox_table_last_vacuum_timestamp_seconds{table}       gauge (HealthCollector): last (auto)vacuum,
//	                                                         Unix time, 0 if never
//	txinbox_xmin_horizon_age_xids{source}                    gauge (HealthCollector): age in transactions
//	                                                         of the oldest xmin held; source is backend,
//	                                                         replication_slot or prepared_xact
//	txinbox_xmin_horizon_age_seconds{source}                 gauge (HealthCollector): how long the oldest
//	                                                         holder's transaction has been open; source is
//	                                                         backend or prepared_xact
//	txinbox_outbox_published_total{topic}                    counter: outbox events sent (acknowledged by a
//	                                                         relay's Publisher, and recorded)
//	txinbox_outbox_retries_total{topic, reason}              counter: failed attempts to publish an event,
//	                                                         to be retried; reason is timeout or error
//	txinbox_outbox_dead_total{topic}                         counter: outbox events given up (dead)
//	txinbox_outbox_unsent_events{topic, state}               gauge (OutboxCollector): events not sent and
//	                                                         not dead; state is pending, retrying or claimed
//	txinbox_outbox_lag_seconds{topic}                        gauge (OutboxCollector): age of the oldest
//	                                                         unsent event (admin.OutboxTopicStats's
//	                                                         OldestUnsentAge)
//
// Outcomes and reasons are the values of txinbox.Outcome and worker.Reason (reasons: error, panic,
// timeout, permanent, decode, unknown_kind, crashed).
//
// Spans are not made here: give the Store a Tracer (txinbox.Store.Tracer; package txotel is the
// OpenTelemetry one).
package metrics

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/maintain"
	"github.com/txinbox/txinbox/seen"
	"github.com/txinbox/txinbox/worker"
)

// Config configures Metrics. The zero value is valid.
type Config struct {
	// Registerer receives the collectors. Default: prometheus.DefaultRegisterer.
	Registerer prometheus.Registerer
	// Namespace prefixes every metric name. Default: "txinbox".
	Namespace string
	// ConstLabels are added to every metric (an instance or service name, say). Default: none.
	ConstLabels prometheus.Labels
	// DurationBuckets are the handler duration histogram's buckets, in seconds. Default: 0.5ms to 10s
	// (prometheus.ExponentialBuckets(0.0005, 2.5, 12)).
	DurationBuckets []float64
}

// Metrics counts what receiving Clients, worker Pools, maintainers and outbox Relays do. It
// implements inbox.Observer, seen.Observer, worker.Observer, worker.TakeoverObserver,
// maintain.Observer and outbox.Observer and is safe for concurrent use.
type Metrics struct {
	received      *prometheus.CounterVec
	receiveErrors prometheus.Counter
	processed     *prometheus.CounterVec
	retries       *prometheus.CounterVec
	dead          *prometheus.CounterVec
	duration      *prometheus.HistogramVec
	seen          *prometheus.CounterVec
	seenErrors    *prometheus.CounterVec
	takeovers     *prometheus.CounterVec
	takenOver     *prometheus.CounterVec
	unfinished    *prometheus.CounterVec
	leader        *prometheus.GaugeVec
	runs          *prometheus.CounterVec
	outbox        outboxCounters // outbox.go
}

var (
	_ inbox.Observer          = (*Metrics)(nil)
	_ seen.Observer           = (*Metrics)(nil)
	_ worker.Observer         = (*Metrics)(nil)
	_ worker.TakeoverObserver = (*Metrics)(nil)
	_ maintain.Observer       = (*Metrics)(nil)
)

// New creates the collectors and registers them with cfg.Registerer. It fails if a collector of the
// same name is registered already.
func New(cfg Config) (*Metrics, error) {
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.DefaultRegisterer
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "txinbox"
	}
	if cfg.DurationBuckets == nil {
		cfg.DurationBuckets = prometheus.ExponentialBuckets(0.0005, 2.5, 12)
	}
	opts := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: cfg.Namespace, Name: name, Help: help, ConstLabels: cfg.ConstLabels}
	}
	m := &Metrics{
		received: prometheus.NewCounterVec(prometheus.CounterOpts(opts("received_total",
			"Messages received, by outcome: inserted (new), duplicate (key already stored), conflict (key stored with another payload).")),
			[]string{"consumer", "outcome"}),
		receiveErrors: prometheus.NewCounter(prometheus.CounterOpts(opts("receive_errors_total",
			"Receive calls that failed (invalid message or database error); nothing of them was stored."))),
		processed: prometheus.NewCounterVec(prometheus.CounterOpts(opts("processed_total",
			"Handler attempts finished, by outcome: completed, retry (failed, tried again later), dead (failed, given up).")),
			[]string{"consumer", "kind", "outcome"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts(opts("retries_total",
			"Failed attempts that will be retried, by reason.")),
			[]string{"consumer", "kind", "reason"}),
		dead: prometheus.NewCounterVec(prometheus.CounterOpts(opts("dead_letters_total",
			"Messages given up (dead letters), by reason.")),
			[]string{"consumer", "kind", "reason"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: cfg.Namespace, Name: "handler_duration_seconds",
			Help: "Time spent in handlers, by outcome.", ConstLabels: cfg.ConstLabels, Buckets: cfg.DurationBuckets},
			[]string{"consumer", "kind", "outcome"}),
		seen: prometheus.NewCounterVec(prometheus.CounterOpts(opts("seen_cache_total",
			"Received messages by what the seen-key cache did: hit (answered duplicate without the database), miss, mismatch (cached with another payload) or fallback (cache failed or timed out); all but hit went to the database.")),
			[]string{"consumer", "result"}),
		seenErrors: prometheus.NewCounterVec(prometheus.CounterOpts(opts("seen_cache_errors_total",
			"Seen-key cache errors and timeouts, by operation (get, put, invalidate); the database answered instead.")),
			[]string{"op"}),
		takeovers: prometheus.NewCounterVec(prometheus.CounterOpts(opts("takeovers_total",
			"Takeovers: groups of messages whose batch never finished (its worker died, hung or lost its connection), claimed to run again, by whether the group was one message alone.")),
			[]string{"consumer", "alone"}),
		takenOver: prometheus.NewCounterVec(prometheus.CounterOpts(opts("taken_over_messages_total",
			"Messages taken over (each was in a batch that never finished).")),
			[]string{"consumer"}),
		unfinished: prometheus.NewCounterVec(prometheus.CounterOpts(opts("unfinished_batches_total",
			"Batches that never finished (their worker died, hung or lost its connection), charged by a rescuer, each once: a process that died running four batches counts four; a group taken over that did not finish either (the isolation of a message that kills its process) counts one more.")),
			[]string{"consumer"}),
		leader: prometheus.NewGaugeVec(prometheus.GaugeOpts(opts("maintainer_leader",
			"1 while this process's maintainer (owner) leads the schema's maintenance, 0 once it stopped leading; over all processes, one leads.")),
			[]string{"schema", "owner"}),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts(opts("maintenance_runs_total",
			"Runs of maintenance jobs (rotate, expire-keys, outbox-rotate, vacuum, analyze, health, rollup, pools, and added ones) by this process's leading maintainer, by outcome: ok or error.")),
			[]string{"schema", "job", "outcome"}),
	}
	for _, c := range []prometheus.Collector{m.received, m.receiveErrors, m.processed, m.retries, m.dead, m.duration, m.seen, m.seenErrors,
		m.takeovers, m.takenOver, m.unfinished, m.leader, m.runs} {
		if err := cfg.Registerer.Register(c); err != nil {
			return nil, fmt.Errorf("txinbox metrics: %w", err)
		}
	}
	if err := m.outbox.register(cfg.Registerer, cfg.Namespace, cfg.ConstLabels); err != nil {
		return nil, err
	}
	return m, nil
}

// ReceiveStart implements inbox.Observer: when the call ends, it counts its receipts by consumer and
// outcome, or the error.
func (m *Metrics) ReceiveStart(ctx context.Context, msgs []inbox.Message) (context.Context, func([]inbox.Receipt, error)) {
	return ctx, func(rs []inbox.Receipt, err error) {
		if err != nil {
			m.receiveErrors.Inc()
			return
		}
		outcomes := [...]inbox.Outcome{inbox.Inserted, inbox.Duplicate, inbox.Conflict}
		var counts [len(outcomes)]int // by index in outcomes
		var last string
		flush := func() {
			for i, n := range counts {
				if n > 0 {
					m.received.WithLabelValues(last, string(outcomes[i])).Add(float64(n))
				}
			}
			counts = [len(outcomes)]int{}
		}
		for i, r := range rs {
			if c := msgs[i].Consumer; c != last {
				flush()
				last = c
			}
			if j := slices.Index(outcomes[:], r.Outcome); j >= 0 {
				counts[j]++
			}
		}
		flush()
	}
}

// SeenLookup implements seen.Observer: it counts messages by consumer and seen-key cache result.
func (m *Metrics) SeenLookup(consumer string, result seen.Result, messages int) {
	m.seen.WithLabelValues(consumer, string(result)).Add(float64(messages))
}

// SeenError implements seen.Observer: it counts cache errors by operation.
func (m *Metrics) SeenError(op seen.Op, _ error) {
	m.seenErrors.WithLabelValues(string(op)).Inc()
}

// Handled implements worker.Observer.
func (m *Metrics) Handled(e worker.HandleEvent) {
	outcome := string(e.Outcome)
	m.processed.WithLabelValues(e.Consumer, e.Kind, outcome).Inc()
	switch e.Outcome {
	case txinbox.OutcomeRetry:
		m.retries.WithLabelValues(e.Consumer, e.Kind, string(e.Reason)).Inc()
	case txinbox.OutcomeDead:
		m.dead.WithLabelValues(e.Consumer, e.Kind, string(e.Reason)).Inc()
	}
	if e.Duration > 0 {
		m.duration.WithLabelValues(e.Consumer, e.Kind, outcome).Observe(e.Duration.Seconds())
	}
}

// Charged implements worker.TakeoverObserver.
func (m *Metrics) Charged(e worker.ChargeEvent) {
	m.unfinished.WithLabelValues(e.Consumer).Inc()
}

// TakenOver implements worker.TakeoverObserver.
func (m *Metrics) TakenOver(e worker.TakeoverEvent) {
	m.takeovers.WithLabelValues(e.Consumer, strconv.FormatBool(e.Alone)).Inc()
	m.takenOver.WithLabelValues(e.Consumer).Add(float64(e.Messages))
}

// Leader implements maintain.Observer: txinbox_maintainer_leader{schema, owner} is 1 while the
// maintainer leads, 0 after.
func (m *Metrics) Leader(e maintain.LeaderEvent) {
	v := 0.0
	if e.Leading {
		v = 1
	}
	m.leader.WithLabelValues(e.Schema, e.Owner).Set(v)
}

// Ran implements maintain.Observer: it counts the run by job and outcome.
func (m *Metrics) Ran(e maintain.RunEvent) {
	outcome := "ok"
	if e.Err != nil {
		outcome = "error"
	}
	m.runs.WithLabelValues(e.Schema, e.Job, outcome).Inc()
}
