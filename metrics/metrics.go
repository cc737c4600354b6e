// Package metrics exposes txinbox activity as Prometheus metrics.
//
// [New] registers every metric of a txinbox.Store at once. The Metrics value it returns is a
// txinbox.OperationTracer: as the Store's Tracer, it counts what every component made from that Store
// does (receiving, the seen-key cache, handling and takeovers, relaying, the maintainer). The gauges
// (the queue's depth, the tables' dead row versions and the xmin horizon, the outbox's unsent events
// and lag) are read from the Store's database on every scrape, in the Store's schema:
//
//	store := txinbox.Store{DB: pool, Schema: "billing"}
//	reg := prometheus.NewRegistry()
//	m, err := metrics.New(store, metrics.Config{Registerer: reg, Consumers: []string{"ledger"}})
//	store.Tracer = m // or txinbox.Tracers(otelTracer, m), to trace as well
//	client, err := inbox.New(store, inbox.Config{})
//	pool, err := worker.New(store, worker.Config{Consumer: "ledger", Handlers: hs})
//	relay, err := outbox.NewRelay(store, outbox.RelayConfig{Publisher: pub})
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
//	                                                         seen-key cache did (txinbox.Store.SeenCache):
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
//	txinbox_queue_messages{consumer, state}                  gauge (queue): queued messages; state is
//	                                                         ready, waiting or claimed
//	txinbox_queue_oldest_age_seconds{consumer}               gauge (queue): age of the oldest queued
//	                                                         (unfinished) message
//	txinbox_table_live_rows{table}                           gauge (health): estimated live rows of each
//	                                                         txinbox table
//	txinbox_table_dead_rows{table}                           gauge (health): estimated dead row versions
//	                                                         not yet reclaimed by vacuum
//	txinbox_table_last_vacuum_timestamp_seconds{table}       gauge (health): last (auto)vacuum, Unix
//	                                                         time, 0 if never
//	txinbox_generation                                       gauge (health): the inbox's current generation
//	txinbox_generation_began_timestamp_seconds               gauge (health): when it began, Unix time
//	txinbox_xmin_horizon_age_xids{source}                    gauge (health): age in transactions of the
//	                                                         oldest xmin held; source is backend,
//	                                                         replication_slot or prepared_xact
//	txinbox_xmin_horizon_age_seconds{source}                 gauge (health): how long the oldest holder's
//	                                                         transaction has been open; source is backend
//	                                                         or prepared_xact
//	txinbox_outbox_published_total{topic}                    counter: outbox events sent (acknowledged by a
//	                                                         relay's Publisher, and recorded)
//	txinbox_outbox_retries_total{topic, reason}              counter: failed attempts to publish an event,
//	                                                         to be retried; reason is timeout or error
//	txinbox_outbox_dead_total{topic}                         counter: outbox events given up (dead)
//	txinbox_outbox_unsent_events{topic, state}               gauge (outbox): events not sent and not dead;
//	                                                         state is pending, retrying or claimed
//	txinbox_outbox_lag_seconds{topic}                        gauge (outbox): age of the oldest unsent
//	                                                         event (admin.OutboxTopicStats's
//	                                                         OldestUnsentAge)
//	txinbox_paused_since_timestamp_seconds{what, name}       gauge (pause): when a paused consumer
//	                                                         (what consumer) or outbox topic (what topic)
//	                                                         was paused, Unix time; absent when not paused
//
// The counters and the leader gauge come from the operations the Store's Tracer is told of
// (txinbox.Op): received_total and receive_errors_total from OpReceive; seen_cache_total and
// seen_cache_errors_total from OpSeenGet, OpSeenPut and OpSeenInvalidate; processed_total,
// retries_total, dead_letters_total and handler_duration_seconds from OpHandled (committed outcomes);
// unfinished_batches_total from OpCharge; takeovers_total and taken_over_messages_total from
// OpTakeover; the outbox's counters from OpRelayed (recorded outcomes); maintainer_leader from OpLead
// (1 from its TraceStart, 0 from its TraceEnd); maintenance_runs_total from OpJob.
//
// The gauges are read on every scrape, each group with its own statements: queue, one query of the
// queue table (inbox_queue: unfinished messages only, so its cost grows with the backlog, not with the
// history); health, three statements on PostgreSQL's statistics views (their cost does not grow with
// the tables); outbox, one query of the outbox's queue (unsent events only, each read by its id for
// its topic: the query of admin.Admin.OutboxStats that reads the queue; the sent and dead events are
// not counted, which needs a scan of the outbox table: see txinbox_outbox_published_total and
// txinbox_outbox_dead_total); pause, two queries of the tables of paused consumers and topics (as
// small as what is paused). A failed statement is reported to the scrape as an error.
//
// The xmin horizon is the oldest transaction whose effects some snapshot may still need: vacuum keeps
// every row version deleted after it, in every table. A session left idle in a transaction, a
// forgotten prepared transaction or an inactive replication slot holds it back, and the queue table
// (every message inserts, claims and deletes a row in it) fills with dead row versions that every
// claim reads through. Alert on txinbox_xmin_horizon_age_seconds (minutes, not hours) and on
// txinbox_table_dead_rows of inbox_queue.
//
// Outcomes and reasons are the values of txinbox.Outcome and of txinbox.TraceEnd.Reason (error, panic,
// timeout, permanent, decode, unknown_kind, crashed).
//
// Spans are not made here: package txotel's Tracer makes them; combine both with txinbox.Tracers.
// Metrics ignores the operations it counts nothing of (txinbox.OpHandle, OpPublish, OpRelay).
package metrics

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/internal/limits"
	"github.com/txinbox/txinbox/internal/textcheck"
)

// Config configures the metrics of New. The zero value is valid.
type Config struct {
	// Registerer receives every metric. Default: prometheus.DefaultRegisterer.
	Registerer prometheus.Registerer
	// Namespace prefixes every metric name. Default: "txinbox".
	Namespace string
	// ConstLabels are added to every metric (an instance or service name, say). Default: none.
	ConstLabels prometheus.Labels
	// DurationBuckets are the handler duration histogram's buckets, in seconds. Default: 0.5ms to 10s
	// (prometheus.ExponentialBuckets(0.0005, 2.5, 12)).
	DurationBuckets []float64
	// Consumers are always reported by the queue gauges, with zeros when they have nothing queued (so
	// that their series do not vanish when the queue drains). Other consumers are reported while they
	// have messages queued. Each must pass txinbox.ValidateName. Default: none.
	Consumers []string
	// Topics are always reported by the outbox gauges, with zeros when they have no unsent event (so
	// that their series do not vanish when the outbox drains). Other topics are reported while they
	// have unsent events. Default: none.
	Topics []string
}

// gaugeTimeout bounds the statements each group of gauges runs on a scrape (documented on New).
const gaugeTimeout = 5 * time.Second

// Metrics counts what receiving Clients, worker Pools, maintainers and outbox Relays do: it is a
// txinbox.OperationTracer, to be given as (or combined, with txinbox.Tracers, into) the
// txinbox.Store.Tracer of the components. It is safe for concurrent use.
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

var _ txinbox.OperationTracer = (*Metrics)(nil)

// New creates every metric of store (the counters and histogram that Metrics counts, and the gauges
// read from store's database on every scrape: its DB, a *pgxpool.Pool, say, runs the scrapes'
// statements; its Schema says which tables) and registers them with cfg.Registerer. It returns a
// *[txinbox.ConfigError] if store, a consumer or a topic is invalid, registering nothing, and fails
// if a metric of the same name is registered already. The statements of each group of gauges are
// bounded by 5s per scrape; a group that takes longer reports its error to the registry.
func New(store txinbox.Store, cfg Config) (*Metrics, error) {
	store, err := store.Resolve()
	if err != nil {
		return nil, err
	}
	if err := checkNames(cfg); err != nil {
		return nil, err
	}
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
	for _, c := range []prometheus.Collector{newQueueCollector(store, cfg), newHealthCollector(store, cfg), newOutboxCollector(store, cfg), newPauseCollector(store, cfg)} {
		if err := cfg.Registerer.Register(c); err != nil {
			return nil, fmt.Errorf("txinbox metrics: %w", err)
		}
	}
	return m, nil
}

// checkNames returns a *txinbox.ConfigError for a consumer or topic of cfg that none can have.
func checkNames(cfg Config) error {
	for _, c := range cfg.Consumers {
		if err := txinbox.ValidateName(c); err != nil {
			return &txinbox.ConfigError{Field: "Consumers", Reason: err.Error()}
		}
	}
	for _, tp := range cfg.Topics {
		if err := textcheck.Check(tp, limits.TopicBytes, false); err != nil {
			return &txinbox.ConfigError{Field: "Topics", Reason: fmt.Sprintf("%q %v", tp, err)}
		}
	}
	return nil
}

// startKey is the context key under which a Metrics keeps the TraceStart of an operation it counts.
type startKey struct{ m *Metrics }

// TraceStart implements txinbox.OperationTracer: it keeps d in the returned context for TraceEnd,
// for the operations it counts, and sets txinbox_maintainer_leader to 1 when a maintainer starts
// leading (txinbox.OpLead).
func (m *Metrics) TraceStart(ctx context.Context, d txinbox.TraceStart) context.Context {
	switch d.Op {
	case txinbox.OpReceive, txinbox.OpSeenGet, txinbox.OpHandled, txinbox.OpCharge, txinbox.OpTakeover,
		txinbox.OpRelayed, txinbox.OpJob:
	case txinbox.OpLead:
		m.leader.WithLabelValues(d.Schema, d.Owner).Set(1)
	case txinbox.OpSeenPut, txinbox.OpSeenInvalidate:
		return ctx // TraceEnd's data is enough
	default:
		return ctx // counted by nothing
	}
	return context.WithValue(ctx, startKey{m}, d)
}

// TraceEnd implements txinbox.OperationTracer: it counts the operation that ended (see the package
// documentation for which metric counts what).
func (m *Metrics) TraceEnd(ctx context.Context, d txinbox.TraceEnd) {
	switch d.Op {
	case txinbox.OpSeenPut:
		m.seenError("put", d.Err)
		return
	case txinbox.OpSeenInvalidate:
		m.seenError("invalidate", d.Err)
		return
	}
	s, ok := ctx.Value(startKey{m}).(txinbox.TraceStart)
	if !ok || s.Op != d.Op {
		return // not an operation this Metrics counts, or not with the context its TraceStart returned
	}
	switch d.Op {
	case txinbox.OpReceive:
		if d.Err != nil {
			m.receiveErrors.Inc()
			return
		}
		m.countByConsumer(m.received, s.Messages, d.Results)
	case txinbox.OpSeenGet:
		m.seenError("get", d.Err)
		m.countByConsumer(m.seen, s.Messages, d.Results)
	case txinbox.OpHandled:
		m.handled(s, d)
	case txinbox.OpCharge:
		m.unfinished.WithLabelValues(s.Consumer).Inc()
	case txinbox.OpTakeover:
		m.takeovers.WithLabelValues(s.Consumer, strconv.FormatBool(len(s.Messages) == 1)).Inc()
		m.takenOver.WithLabelValues(s.Consumer).Add(float64(len(s.Messages)))
	case txinbox.OpRelayed:
		m.relayed(s, d)
	case txinbox.OpLead:
		m.leader.WithLabelValues(s.Schema, s.Owner).Set(0)
	case txinbox.OpJob:
		outcome := "ok"
		if d.Err != nil {
			outcome = "error"
		}
		m.runs.WithLabelValues(s.Schema, s.Job, outcome).Inc()
	}
}

// countByConsumer adds to c{consumer, result} one for each results[i], the consumer being msgs[i]'s;
// runs of one consumer and result are added at once.
func (m *Metrics) countByConsumer(c *prometheus.CounterVec, msgs []txinbox.TraceMessage, results []string) {
	if len(results) != len(msgs) {
		return
	}
	type key struct{ consumer, result string }
	var last key
	n := 0
	for i, r := range results {
		k := key{msgs[i].Consumer, r}
		if k != last && n > 0 {
			c.WithLabelValues(last.consumer, last.result).Add(float64(n))
			n = 0
		}
		last = k
		n++
	}
	if n > 0 {
		c.WithLabelValues(last.consumer, last.result).Add(float64(n))
	}
}

// seenError counts a seen-key cache error of the operation op, if err is one.
func (m *Metrics) seenError(op string, err error) {
	if err != nil {
		m.seenErrors.WithLabelValues(op).Inc()
	}
}

// handled counts the committed outcome of one message's attempt (txinbox.OpHandled).
func (m *Metrics) handled(s txinbox.TraceStart, d txinbox.TraceEnd) {
	var kind string
	if len(s.Messages) > 0 {
		kind = s.Messages[0].Kind
	}
	outcome := string(d.Outcome)
	m.processed.WithLabelValues(s.Consumer, kind, outcome).Inc()
	switch d.Outcome {
	case txinbox.OutcomeRetry:
		m.retries.WithLabelValues(s.Consumer, kind, d.Reason).Inc()
	case txinbox.OutcomeDead:
		m.dead.WithLabelValues(s.Consumer, kind, d.Reason).Inc()
	}
	if d.Duration > 0 {
		m.duration.WithLabelValues(s.Consumer, kind, outcome).Observe(d.Duration.Seconds())
	}
}
