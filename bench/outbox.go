package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/migrate"
	"github.com/txinbox/txinbox/outbox"
)

// The outbox benchmark: the same events, written in PostgreSQL transactions, forwarded to a broker
// (NATS JetStream or RabbitMQ) by txinbox's relay (package outbox with the adapters' publishers), by
// Watermill's SQL publisher and forwarder, and by a raw loop (claim 100 with FOR UPDATE SKIP LOCKED,
// publish with asynchronous acks, mark sent, commit) that bounds what any relay can do here. Every
// system publishes through its own broker connection to a stream or queue of its own, created for
// the run and deleted after it; events carry the same payload, {"n":N,"amount":1}, by which each
// broker acknowledgment is matched to the commit of its event.

// OutboxSystem is a system of the outbox benchmark.
type OutboxSystem string

// The systems of the outbox benchmark.
const (
	OutboxRelay     OutboxSystem = "txinbox relay"
	OutboxWatermill OutboxSystem = "Watermill forwarder"
	OutboxRaw       OutboxSystem = "raw loop"
)

// OutboxBroker is a broker of the outbox benchmark.
type OutboxBroker string

// The brokers of the outbox benchmark.
const (
	BrokerNATS     OutboxBroker = "NATS JetStream"
	BrokerRabbitMQ OutboxBroker = "RabbitMQ"
)

// OutboxConfig configures the outbox benchmark.
type OutboxConfig struct {
	NATSURL string // nats://127.0.0.1:4222
	AMQPURL string // amqp://guest:guest@127.0.0.1:5672/
	// Batch is the events per claim of every system: RelayConfig.BatchSize, Watermill's
	// SubscribeBatchSize, the raw loop's LIMIT. Default 100.
	Batch int
	// Workers is the relay's Concurrency and the raw loop's number of loops (Watermill's forwarder
	// has one). Default 2 (RelayConfig.Concurrency's default).
	Workers int
	// ClaimInTx hides the pool's pipelining from the relay (txinbox.DB without SendBatch), so that
	// it claims in an explicit transaction, a round trip per statement: the relay's claim before it
	// was pipelined, for a side-by-side comparison of drains (txbench --outbox-ab). Such a relay
	// cannot open a listening connection (its DB is not a *pgxpool.Pool): it polls, every 10ms while
	// busy, which a drain of a backlog never waits for.
	ClaimInTx bool
	// Poll is the idle poll interval of Watermill's subscriber and the raw loop, as the relay's fast
	// polling after activity (every 10ms) it is compared with. Default 10ms.
	Poll time.Duration
}

// WithDefaults returns c with its zero fields set to their defaults.
func (c OutboxConfig) WithDefaults() OutboxConfig {
	if c.NATSURL == "" {
		c.NATSURL = "nats://127.0.0.1:4222"
	}
	if c.AMQPURL == "" {
		c.AMQPURL = "amqp://guest:guest@127.0.0.1:5672/"
	}
	if c.Batch == 0 {
		c.Batch = 100 // RelayConfig.BatchSize's default
	}
	if c.Workers == 0 {
		c.Workers = 2 // RelayConfig.Concurrency's default
	}
	if c.Poll == 0 {
		c.Poll = 10 * time.Millisecond
	}
	return c
}

// Describe says how sys is configured under c.
func (c OutboxConfig) Describe(sys OutboxSystem) string {
	c = c.WithDefaults()
	switch sys {
	case OutboxRelay:
		return fmt.Sprintf("BatchSize=%d, Concurrency=%d, defaults otherwise (LISTEN, fast polling every 10ms after activity); publishers' defaults (NATS: PublishMsgAsync, up to 256 PubAcks pending per call)", c.Batch, c.Workers)
	case OutboxWatermill:
		return fmt.Sprintf("DefaultPostgreSQLSchema (SubscribeBatchSize=%d) + offsets adapter, PollInterval=%s, one forwarder; NATS: a message.Publisher of the bench awaiting each PubAck (no Watermill NATS package is available here); RabbitMQ: watermill-amqp durable queue, ConfirmDelivery", c.Batch, c.Poll)
	default:
		return fmt.Sprintf("%d loops; claim %d (FOR UPDATE SKIP LOCKED), publish all with async acks (each in the relay's CloudEvents envelope), UPDATE sent, COMMIT; idle poll %s", c.Workers, c.Batch, c.Poll)
	}
}

// OutboxDrainResult is one drain of a backlog of events.
type OutboxDrainResult struct {
	System OutboxSystem
	Broker OutboxBroker
	Events int
	// Rate is Events divided by Elapsed: from the start of the system until every event was
	// acknowledged by the broker and recorded as sent in the database.
	Rate    float64
	Elapsed time.Duration
	// Partial is set when the system did not finish within the drain's time limit (a minute plus a
	// millisecond per event; 20 s plus that in quick mode): Rate is then Acked over Elapsed.
	Partial bool
	Acked   int
	// Stored is the number of messages the broker's stream or queue held at the end; Repeats counts
	// acknowledgments of events already acknowledged.
	Stored, Repeats int
	FP              Footprint
	// Phases, of the relay only: the time its Publisher calls took, and their count.
	Publish      time.Duration
	PublishCalls int
}

// OutboxLatencyResult is the distribution of commit-to-broker-ack latencies at a steady rate.
type OutboxLatencyResult struct {
	System        OutboxSystem
	Broker        OutboxBroker
	Rate          int
	Achieved      float64
	Samples       int
	P50, P95, P99 time.Duration
	Max           time.Duration
	FP            Footprint
	// Behind is set when the system fell behind: Acked of Total events were acknowledged 30 s (10 s in
	// quick mode) after the last commit (the percentiles are then of those only, and understate the
	// latency).
	Behind       bool
	Acked, Total int
}

// ackLog records when the broker acknowledged each event, by the event's number n (1..total).
type ackLog struct {
	clk     clock
	at      []atomic.Int64
	count   atomic.Int64
	repeats atomic.Int64
	done    chan struct{}
}

func newAckLog(clk clock, total int) *ackLog {
	return &ackLog{clk: clk, at: make([]atomic.Int64, total+1), done: make(chan struct{})}
}

// ack records the acknowledgment of the event whose payload is p.
func (a *ackLog) ack(p []byte) {
	n := payloadN(p)
	if n < 1 || n >= len(a.at) {
		return
	}
	if !a.at[n].CompareAndSwap(0, max(a.clk.now(), 1)) {
		a.repeats.Add(1)
		return
	}
	if a.count.Add(1) == int64(len(a.at)-1) {
		close(a.done)
	}
}

// payloadN returns N of a payload {"n":N,...}, or 0.
func payloadN(p []byte) int {
	const prefix = `{"n":`
	if len(p) <= len(prefix) || string(p[:len(prefix)]) != prefix {
		return 0
	}
	end := len(prefix)
	for end < len(p) && p[end] >= '0' && p[end] <= '9' {
		end++
	}
	n, _ := strconv.Atoi(string(p[len(prefix):end]))
	return n
}

// outboxTarget is one system over one broker, in a schema of its own.
type outboxTarget struct {
	// write writes the events ns in tx.
	write func(ctx context.Context, tx pgx.Tx, ns []int) error
	// start starts forwarding; stop stops it.
	start func(ctx context.Context) error
	stop  func(ctx context.Context)
	// unsent counts the events not yet recorded as sent.
	unsent func(ctx context.Context) (int64, error)
	// publish, of the relay: the time its Publisher calls took, and their count.
	publish func() (time.Duration, int)
}

// outboxSetup is a target with its schema and broker.
type outboxSetup struct {
	s      *Schema
	broker outboxBrokerConn
	t      *outboxTarget
	acks   *ackLog
}

func (u *outboxSetup) close(ctx context.Context) {
	u.broker.close(context.WithoutCancel(ctx))
	u.s.Drop(ctx)
}

// newOutboxSetup makes sys over broker, with a pool of conns connections more than it needs itself,
// acknowledgments recorded into a log of total events.
func (e *Env) newOutboxSetup(ctx context.Context, sys OutboxSystem, broker OutboxBroker, cfg OutboxConfig, conns, total int) (*outboxSetup, error) {
	cfg = cfg.WithDefaults()
	name := map[OutboxSystem]string{OutboxRelay: "relay", OutboxWatermill: "watermill", OutboxRaw: "rawoutbox"}[sys]
	s, err := e.NewSchema(ctx, name, int32(cfg.Workers+4+conns))
	if err != nil {
		return nil, err
	}
	var b outboxBrokerConn
	switch broker {
	case BrokerNATS:
		b, err = newNATSBroker(ctx, cfg.NATSURL)
	default:
		b, err = newAMQPBroker(ctx, cfg.AMQPURL)
	}
	if err != nil {
		s.Drop(ctx)
		return nil, fmt.Errorf("%s: %w", broker, err)
	}
	u := &outboxSetup{s: s, broker: b, acks: newAckLog(clock{base: time.Now()}, total)}
	switch sys {
	case OutboxRelay:
		u.t, err = e.relayTarget(ctx, s, b, cfg, u.acks)
	case OutboxWatermill:
		u.t, err = watermillTarget(ctx, s, b, cfg, u.acks)
	default:
		u.t, err = rawOutboxTarget(ctx, s, b, cfg, u.acks)
	}
	if err != nil {
		u.close(ctx)
		return nil, fmt.Errorf("%s: %w", sys, err)
	}
	return u, nil
}

// OutboxDrain writes a backlog of n events (1,000 per transaction), then starts sys and measures how
// long it takes until the broker acknowledged every event and each is recorded as sent.
func (e *Env) OutboxDrain(ctx context.Context, sys OutboxSystem, broker OutboxBroker, n int, cfg OutboxConfig) (OutboxDrainResult, error) {
	res := OutboxDrainResult{System: sys, Broker: broker, Events: n}
	u, err := e.newOutboxSetup(ctx, sys, broker, cfg, 0, n)
	if err != nil {
		return res, err
	}
	defer u.close(ctx)
	const perTx = 1000
	ns := make([]int, 0, perTx)
	for i := 1; i <= n; i++ {
		ns = append(ns, i)
		if len(ns) == perTx || i == n {
			if err := pgx.BeginFunc(ctx, u.s.Pool, func(tx pgx.Tx) error { return u.t.write(ctx, tx, ns) }); err != nil {
				return res, fmt.Errorf("writing the backlog: %w", err)
			}
			ns = ns[:0]
		}
	}
	if err := u.s.Settle(ctx); err != nil {
		return res, err
	}
	mon := e.StartMonitor(ctx, u.s.App)
	start := time.Now()
	if err := u.t.start(ctx); err != nil {
		return res, err
	}
	defer u.t.stop(ctx)
	limit := time.Minute + time.Duration(n)*time.Millisecond
	if e.Quick {
		limit = 20*time.Second + time.Duration(n)*time.Millisecond
	}
	select {
	case <-u.acks.done:
	case <-time.After(limit):
		res.Elapsed = time.Since(start)
		res.FP = mon.Stop()
		res.Partial, res.Acked = true, int(u.acks.count.Load())
		res.Rate = float64(res.Acked) / res.Elapsed.Seconds()
		res.Repeats = int(u.acks.repeats.Load())
		res.Stored, _ = u.broker.stored(ctx, 0)
		return res, nil
	case <-ctx.Done():
		return res, ctx.Err()
	}
	res.Acked = n
	for {
		left, err := u.t.unsent(ctx)
		if err != nil {
			return res, err
		}
		if left == 0 {
			break
		}
		if time.Since(start) > limit {
			return res, fmt.Errorf("%d events acknowledged but not recorded as sent after %s", left, limit)
		}
		time.Sleep(5 * time.Millisecond)
	}
	res.Elapsed = time.Since(start)
	res.FP = mon.Stop()
	res.Rate = float64(n) / res.Elapsed.Seconds()
	if u.t.publish != nil {
		res.Publish, res.PublishCalls = u.t.publish()
	}
	res.Repeats = int(u.acks.repeats.Load())
	if res.Stored, err = u.broker.stored(ctx, n); err != nil {
		return res, err
	}
	if res.Stored < n {
		return res, fmt.Errorf("the broker holds %d messages, want %d", res.Stored, n)
	}
	return res, nil
}

// OutboxLatency runs sys, and writes events one per transaction at rate per second for d from
// LatencySenders goroutines following a fixed schedule; it measures the time from each commit to the
// broker's acknowledgment of the event. The first second is a warm-up and not measured.
func (e *Env) OutboxLatency(ctx context.Context, sys OutboxSystem, broker OutboxBroker, rate int, d time.Duration, cfg OutboxConfig) (OutboxLatencyResult, error) {
	res := OutboxLatencyResult{System: sys, Broker: broker, Rate: rate}
	total := int(d.Seconds() * float64(rate))
	u, err := e.newOutboxSetup(ctx, sys, broker, cfg, LatencySenders, total)
	if err != nil {
		return res, err
	}
	defer u.close(ctx)
	mon := e.StartMonitor(ctx, u.s.App)
	if err := u.t.start(ctx); err != nil {
		return res, err
	}
	defer u.t.stop(ctx)
	clk := u.acks.clk
	commitAt := make([]atomic.Int64, total+1)
	jobs := make(chan int, 1024)
	errc := make(chan error, 1)
	var wg sync.WaitGroup
	for range LatencySenders {
		wg.Go(func() {
			for n := range jobs {
				err := pgx.BeginFunc(ctx, u.s.Pool, func(tx pgx.Tx) error { return u.t.write(ctx, tx, []int{n}) })
				if err != nil {
					select {
					case errc <- err:
					default:
					}
					continue
				}
				commitAt[n].Store(clk.now())
			}
		})
	}
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	for i := 1; i <= total; i++ {
		if w := time.Until(start.Add(time.Duration(i) * interval)); w > 0 {
			time.Sleep(w)
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	sent := time.Since(start)
	wait := 30 * time.Second
	if e.Quick {
		wait = 10 * time.Second
	}
	select {
	case <-u.acks.done:
	case <-time.After(wait):
	case <-ctx.Done():
	}
	res.FP = mon.Stop()
	select {
	case err := <-errc:
		return res, err
	default:
	}
	res.Acked, res.Total = int(u.acks.count.Load()), total
	res.Behind = res.Acked < total
	res.Achieved = float64(total) / sent.Seconds()
	var lats []time.Duration
	for i := rate + 1; i <= total; i++ {
		if at := u.acks.at[i].Load(); at != 0 {
			lats = append(lats, time.Duration(max(0, at-commitAt[i].Load())))
		}
	}
	if len(lats) == 0 {
		if res.Behind {
			return res, nil // nothing acknowledged after the warm-up second: no percentile
		}
		return res, errors.New("outbox latency: nothing measured after the warm-up second")
	}
	slices.Sort(lats)
	res.Samples = len(lats)
	res.P50, res.P95, res.P99 = Percentile(lats, 50), Percentile(lats, 95), Percentile(lats, 99)
	res.Max = lats[len(lats)-1]
	return res, nil
}

// timedPublisher records the acknowledgment of every event its Publisher acknowledged, and the time
// the calls took.
type timedPublisher struct {
	p     outbox.Publisher
	acks  *ackLog
	nanos atomic.Int64
	calls atomic.Int64
}

func (t *timedPublisher) Publish(ctx context.Context, events []outbox.Event) error {
	start := time.Now()
	err := t.p.Publish(ctx, events)
	t.nanos.Add(int64(time.Since(start)))
	t.calls.Add(1)
	var be *outbox.BatchError
	for i := range events {
		switch {
		case err == nil:
		case errors.As(err, &be) && len(be.Errs) == len(events) && be.Errs[i] == nil:
		default:
			continue
		}
		t.acks.ack(events[i].Payload)
	}
	return err
}

// relayTarget is txinbox's Client.Publish and Relay.
func (e *Env) relayTarget(ctx context.Context, s *Schema, b outboxBrokerConn, cfg OutboxConfig, acks *ackLog) (*outboxTarget, error) {
	st := txinbox.Store{DB: s.Pool, Schema: s.Name}
	if err := migrate.Up(ctx, st); err != nil {
		return nil, fmt.Errorf("txinbox migrate: %w", err)
	}
	client, err := outbox.New(st, outbox.Config{})
	if err != nil {
		return nil, err
	}
	pub, err := b.relayPublisher()
	if err != nil {
		return nil, err
	}
	tp := &timedPublisher{p: pub, acks: acks}
	rcfg := outbox.RelayConfig{Publisher: tp, BatchSize: cfg.Batch, Concurrency: cfg.Workers}
	st.Logger = e.quietLogger()
	if cfg.ClaimInTx {
		st.DB = struct{ txinbox.DB }{s.Pool}
	}
	relay, err := outbox.NewRelay(st, rcfg)
	if err != nil {
		return nil, err
	}
	topic := b.topic()
	return &outboxTarget{
		write: func(ctx context.Context, tx pgx.Tx, ns []int) error {
			msgs := make([]outbox.Message, len(ns))
			for i, n := range ns {
				msgs[i] = outbox.Message{Topic: topic, Payload: payload(n, 1)}
			}
			_, err := client.Publish(ctx, tx, msgs...)
			return err
		},
		start: relay.Start,
		stop: func(ctx context.Context) {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			_ = relay.Stop(sctx)
		},
		unsent: func(ctx context.Context) (int64, error) {
			var n int64
			err := s.Pool.QueryRow(ctx, "SELECT count(*) FROM "+s.T("outbox_queue")).Scan(&n)
			return n, err
		},
		publish: func() (time.Duration, int) { return time.Duration(tp.nanos.Load()), int(tp.calls.Load()) },
	}, nil
}

// ackingPublisher records the acknowledgment of every message its Watermill publisher published.
type ackingPublisher struct {
	p    message.Publisher
	acks *ackLog
}

func (a ackingPublisher) Publish(topic string, msgs ...*message.Message) error {
	if err := a.p.Publish(topic, msgs...); err != nil {
		return err
	}
	for _, m := range msgs {
		a.acks.ack(m.Payload)
	}
	return nil
}

func (a ackingPublisher) Close() error { return a.p.Close() }

// watermillForwarderTopic is the topic (table) of Watermill's forwarder.
const watermillForwarderTopic = "forwarder"

// watermillTarget is Watermill's SQL publisher (through forwarder.Publisher, in the writing
// transaction) and its forwarder, reading with the SQL subscriber and publishing to the broker.
func watermillTarget(ctx context.Context, s *Schema, b outboxBrokerConn, cfg OutboxConfig, acks *ackLog) (*outboxTarget, error) {
	logger := watermill.NopLogger{}
	schema := wmsql.DefaultPostgreSQLSchema{
		GenerateMessagesTableName: func(topic string) string { return pgx.Identifier{s.Name, "watermill_" + topic}.Sanitize() },
		SubscribeBatchSize:        cfg.Batch,
	}
	offsets := wmsql.DefaultPostgreSQLOffsetsAdapter{
		GenerateMessagesOffsetsTableName: func(topic string) string {
			return pgx.Identifier{s.Name, "watermill_offsets_" + topic}.Sanitize()
		},
	}
	sub, err := wmsql.NewSubscriber(wmsql.BeginnerFromPgx(s.Pool), wmsql.SubscriberConfig{
		SchemaAdapter: schema, OffsetsAdapter: offsets, InitializeSchema: true, PollInterval: cfg.Poll,
	}, logger)
	if err != nil {
		return nil, err
	}
	if err := sub.SubscribeInitialize(watermillForwarderTopic); err != nil {
		_ = sub.Close()
		return nil, err
	}
	out, err := b.watermillPublisher()
	if err != nil {
		_ = sub.Close()
		return nil, err
	}
	fwd, err := forwarder.NewForwarder(sub, ackingPublisher{p: out, acks: acks}, logger, forwarder.Config{ForwarderTopic: watermillForwarderTopic})
	if err != nil {
		_ = sub.Close()
		_ = out.Close()
		return nil, err
	}
	topic := b.topic()
	var runErr chan error
	return &outboxTarget{
		write: func(ctx context.Context, tx pgx.Tx, ns []int) error {
			pub, err := wmsql.NewPublisher(wmsql.TxFromPgx(tx), wmsql.PublisherConfig{SchemaAdapter: schema}, logger)
			if err != nil {
				return err
			}
			msgs := make([]*message.Message, len(ns))
			for i, n := range ns {
				msgs[i] = message.NewMessage(watermill.NewUUID(), payload(n, 1))
			}
			return forwarder.NewPublisher(pub, forwarder.PublisherConfig{ForwarderTopic: watermillForwarderTopic}).Publish(topic, msgs...)
		},
		start: func(ctx context.Context) error {
			runErr = make(chan error, 1)
			go func() { runErr <- fwd.Run(context.WithoutCancel(ctx)) }()
			select {
			case <-fwd.Running():
				return nil
			case err := <-runErr:
				return fmt.Errorf("watermill forwarder: %w", err)
			}
		},
		stop: func(context.Context) {
			_ = fwd.Close()
			if runErr != nil {
				// Run's own return after Close: the run's figures are already taken.
				if err := <-runErr; err != nil {
					_ = err
				}
			}
			_ = sub.Close()
			_ = out.Close()
		},
		unsent: func(ctx context.Context) (int64, error) {
			// The offset acknowledged is that of the last message forwarded (one consumer group).
			var n int64
			err := s.Pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM "+schema.MessagesTable(watermillForwarderTopic)+
				" m WHERE m.\"offset\" > coalesce((SELECT max(offset_acked) FROM "+offsets.MessagesOffsetsTable(watermillForwarderTopic)+"), 0))").Scan(&n)
			return n, err
		},
	}, nil
}

// rawOutboxTarget is the raw loop: Workers goroutines, each claiming Batch unsent rows with FOR UPDATE
// SKIP LOCKED, publishing them all at once with asynchronous acknowledgments, marking them sent and
// committing, in one transaction. Each message carries the CloudEvents envelope the relay's publisher
// of that broker sends (rawEnvelope), built by hand, so that both move the same messages.
func rawOutboxTarget(ctx context.Context, s *Schema, b outboxBrokerConn, cfg OutboxConfig, acks *ackLog) (*outboxTarget, error) {
	table := s.T("raw_outbox")
	for _, q := range []string{
		"CREATE TABLE " + table + " (id bigserial PRIMARY KEY, event_id uuid NOT NULL DEFAULT gen_random_uuid(), topic text NOT NULL, payload text NOT NULL, created_at timestamptz NOT NULL DEFAULT now(), sent_at timestamptz)",
		"CREATE INDEX ON " + table + " (id) WHERE sent_at IS NULL",
	} {
		if _, err := s.Pool.Exec(ctx, q); err != nil {
			return nil, err
		}
	}
	topic := b.topic()
	claim := "SELECT id, event_id::text, payload, created_at FROM " + table + " WHERE sent_at IS NULL ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED"
	mark := "UPDATE " + table + " SET sent_at = now() WHERE id = ANY($1)"
	var (
		cancel context.CancelFunc
		wg     sync.WaitGroup
	)
	// once claims, publishes and marks one batch; it returns how many events it sent.
	once := func(ctx context.Context, pub rawPublisher) (int, error) {
		tx, err := s.Pool.Begin(ctx)
		if err != nil {
			return 0, err
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		rows, err := tx.Query(ctx, claim, cfg.Batch)
		if err != nil {
			return 0, err
		}
		var ids []int64
		var evs []rawEvent
		for rows.Next() {
			var id int64
			var ev rawEvent
			if err := rows.Scan(&id, &ev.id, &ev.payload, &ev.created); err != nil {
				rows.Close()
				return 0, err
			}
			ids, evs = append(ids, id), append(evs, ev)
		}
		if err := rows.Err(); err != nil {
			return 0, err
		}
		if len(evs) == 0 {
			return 0, tx.Commit(ctx)
		}
		if err := pub.publish(ctx, evs); err != nil {
			return 0, err
		}
		for _, ev := range evs {
			acks.ack(ev.payload)
		}
		if _, err := tx.Exec(ctx, mark, ids); err != nil {
			return 0, err
		}
		return len(evs), tx.Commit(ctx)
	}
	loop := func(ctx context.Context, pub rawPublisher) {
		defer pub.close()
		for ctx.Err() == nil {
			n, err := once(ctx, pub)
			switch {
			case err != nil && ctx.Err() == nil:
				time.Sleep(100 * time.Millisecond)
			case n == 0:
				time.Sleep(cfg.Poll)
			}
		}
	}
	return &outboxTarget{
		write: func(ctx context.Context, tx pgx.Tx, ns []int) error {
			payloads := make([]string, len(ns))
			for i, n := range ns {
				payloads[i] = string(payload(n, 1))
			}
			_, err := tx.Exec(ctx, "INSERT INTO "+table+" (topic, payload) SELECT $1, p FROM unnest($2::text[]) WITH ORDINALITY AS u(p, o) ORDER BY o", topic, payloads)
			return err
		},
		start: func(ctx context.Context) error {
			pubs := make([]rawPublisher, cfg.Workers)
			for i := range pubs {
				var err error
				if pubs[i], err = b.rawPublisher(); err != nil {
					for _, p := range pubs[:i] {
						p.close()
					}
					return err
				}
			}
			var lctx context.Context
			lctx, cancel = context.WithCancel(context.WithoutCancel(ctx))
			for _, p := range pubs {
				wg.Go(func() { loop(lctx, p) })
			}
			return nil
		},
		stop: func(context.Context) {
			if cancel != nil {
				cancel()
				wg.Wait()
			}
		},
		unsent: func(ctx context.Context) (int64, error) {
			var n int64
			err := s.Pool.QueryRow(ctx, "SELECT count(*) FROM "+table+" WHERE sent_at IS NULL").Scan(&n)
			return n, err
		},
	}, nil
}
