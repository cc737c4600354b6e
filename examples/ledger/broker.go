package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/adapters"
	"github.com/txinbox/txinbox/adapters/natsjs"
	"github.com/txinbox/txinbox/adapters/rabbitmq"
	"github.com/txinbox/txinbox/examples/ledger/internal/api"
	"github.com/txinbox/txinbox/examples/ledger/internal/ledger"
)

// brokerFlags are the flags of the broker consumers of serve and work: OrderPaid events read from
// RabbitMQ and/or NATS JetStream and stored in the inbox (consumer "ledger", kind "OrderPaid") through
// the txinbox adapters, then credited by the same worker handler as the events of POST /v1/events.
type brokerFlags struct {
	amqpURL, amqpQueue                            string
	amqpDeclare                                   bool
	natsURL, natsStream, natsSubject, natsDurable string
	natsAckWait                                   time.Duration
	batchSize                                     int
}

func (b *brokerFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&b.amqpURL, "amqp-url", "", "consume OrderPaid events from RabbitMQ at this URL, e.g. amqp://guest:guest@127.0.0.1:5672/ (empty: off)")
	fs.StringVar(&b.amqpQueue, "amqp-queue", "ledger.order-paid", "RabbitMQ queue to consume (with --amqp-url)")
	fs.BoolVar(&b.amqpDeclare, "amqp-declare", true, "declare --amqp-queue (durable) on connecting, in case it does not exist")
	fs.StringVar(&b.natsURL, "nats-url", "", "consume OrderPaid events from NATS JetStream at this URL, e.g. nats://127.0.0.1:4222 (empty: off)")
	fs.StringVar(&b.natsStream, "nats-stream", "LEDGER", "JetStream stream to consume (with --nats-url); it must exist unless --nats-subject is set")
	fs.StringVar(&b.natsSubject, "nats-subject", "", "subject filter of the consumer; a missing --nats-stream is created with this subject (empty: the whole stream, which must exist)")
	fs.StringVar(&b.natsDurable, "nats-durable", "ledger", "name of the durable JetStream pull consumer (created or updated on start)")
	fs.DurationVar(&b.natsAckWait, "nats-ack-wait", 30*time.Second, "AckWait of the JetStream consumer: redelivery delay of a message whose batch was never acknowledged")
	fs.IntVar(&b.batchSize, "broker-batch-size", 100, "broker messages stored in the inbox (one transaction) and acknowledged together (adapters.BatchConfig.BatchSize)")
}

func (b *brokerFlags) check() error {
	switch {
	case b.amqpURL != "" && b.amqpQueue == "":
		return errors.New("--amqp-url needs --amqp-queue")
	case b.natsURL != "" && b.natsStream == "":
		return errors.New("--nats-url needs --nats-stream")
	case b.natsURL != "" && b.natsDurable == "":
		return errors.New("--nats-url needs --nats-durable")
	case b.batchSize < 1:
		return errors.New("--broker-batch-size must be at least 1")
	}
	return nil
}

// bodyString is a key strategy reading a top-level string field of the JSON body.
func bodyString(field string) adapters.KeyFunc {
	return func(r *adapters.Record) (string, error) {
		var m map[string]json.RawMessage
		var v string
		if json.Unmarshal(r.Body, &m) != nil || json.Unmarshal(m[field], &v) != nil || v == "" {
			return "", fmt.Errorf("%w: no %s string in the body", adapters.ErrNoKey, field)
		}
		return v, nil
	}
}

// sinkConfig says how broker messages become inbox messages. The key is the message id (AMQP
// message-id, JetStream Nats-Msg-Id), else the x-idempotency-key header, else the event_id of the
// body; the handler refuses (dead letter) a message whose key is not its event_id, so producers must
// use the event_id as message id. The ordering key is the account_id, as for POST /v1/events: the
// events of one account are credited one at a time, in arrival order. A message with no kind (AMQP
// type property, x-kind header) is an OrderPaid. The messages are stored in store.
func sinkConfig(store txinbox.Store, logger *slog.Logger) adapters.SinkConfig {
	store.Logger = logger // the consumer's and its Sink's
	return adapters.SinkConfig{
		Store: store, Consumer: ledger.Consumer, DefaultKind: ledger.KindOrderPaid,
		MaxPayloadBytes: api.MaxBodyBytes,
		Key:             adapters.FirstOf(adapters.MessageID(), adapters.Header(adapters.IdempotencyKeyHeader), bodyString("event_id")),
		OrderingKey:     bodyString("account_id"),
	}
}

// consumer is what the adapters' consumers (rabbitmq.Consumer, natsjs.Consumer) have in common.
type consumer interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
	Done() <-chan struct{}
	Stats() adapters.Stats
}

// source is one broker consumer.
type source struct {
	broker string // "rabbitmq" or "nats"
	desc   []any  // for logs
	c      consumer
	close  func()
}

// sources connects what needs connecting and returns the configured consumers (none without broker
// flags), which store into store. Call closeSources when done.
func (b *brokerFlags) sources(ctx context.Context, store txinbox.Store, logger *slog.Logger) ([]*source, error) {
	var out []*source
	if b.amqpURL != "" {
		queue, declare := b.amqpQueue, b.amqpDeclare
		c, err := rabbitmq.New(rabbitmq.Config{
			URL: b.amqpURL, Queue: queue, ConsumerTag: "", BatchConfig: adapters.BatchConfig{BatchSize: b.batchSize},
			Sink: sinkConfig(store, logger),
			Setup: func(ch *amqp.Channel) error {
				if !declare {
					return nil
				}
				_, err := ch.QueueDeclare(queue, true, false, false, false, nil)
				return err
			},
		})
		if err != nil {
			return nil, fmt.Errorf("rabbitmq: %w", err)
		}
		out = append(out, &source{broker: "rabbitmq", desc: []any{"url", redact(b.amqpURL), "queue", queue},
			c: c, close: func() {}})
	}
	if b.natsURL != "" {
		s, err := b.natsSource(ctx, store, logger)
		if err != nil {
			closeSources(out)
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func (b *brokerFlags) natsSource(ctx context.Context, store txinbox.Store, logger *slog.Logger) (*source, error) {
	nc, err := nats.Connect(b.natsURL, nats.Name("ledger"), nats.MaxReconnects(-1))
	if err != nil {
		return nil, fmt.Errorf("nats: connect %s: %w", redact(b.natsURL), err)
	}
	fail := func(err error) (*source, error) { nc.Close(); return nil, fmt.Errorf("nats: %w", err) }
	js, err := jetstream.New(nc)
	if err != nil {
		return fail(err)
	}
	if _, err := js.Stream(ctx, b.natsStream); errors.Is(err, jetstream.ErrStreamNotFound) && b.natsSubject != "" {
		_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: b.natsStream, Subjects: []string{b.natsSubject}})
		if err != nil {
			return fail(fmt.Errorf("create stream %s: %w", b.natsStream, err))
		}
		logger.Info("ledger: created JetStream stream", "stream", b.natsStream, "subject", b.natsSubject)
	} else if err != nil {
		return fail(fmt.Errorf("stream %s: %w", b.natsStream, err))
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, b.natsStream, jetstream.ConsumerConfig{
		Durable: b.natsDurable, AckPolicy: jetstream.AckExplicitPolicy, AckWait: b.natsAckWait, FilterSubject: b.natsSubject,
	})
	if err != nil {
		return fail(fmt.Errorf("consumer %s on stream %s: %w", b.natsDurable, b.natsStream, err))
	}
	c, err := natsjs.New(natsjs.Config{Consumer: cons, BatchConfig: adapters.BatchConfig{BatchSize: b.batchSize}, Sink: sinkConfig(store, logger)})
	if err != nil {
		return fail(err)
	}
	return &source{broker: "nats", desc: []any{"url", redact(b.natsURL), "stream", b.natsStream, "subject", b.natsSubject, "durable", b.natsDurable},
		c: c, close: nc.Close}, nil
}

func closeSources(srcs []*source) {
	for _, s := range srcs {
		s.close()
	}
}

// redact hides the password of a URL, for logs.
func redact(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	return "(invalid URL)"
}

// consuming runs sources until stop is called. Err receives the first error of a consumer that could
// not start or stopped on its own (NATS: the connection was closed or the consumer deleted).
type consuming struct {
	stopping chan struct{}
	wg       sync.WaitGroup
	errc     chan error
	srcs     []*source // all of them
	started  []*source
	logger   *slog.Logger
}

func startConsuming(ctx context.Context, srcs []*source, logger *slog.Logger) *consuming {
	c := &consuming{stopping: make(chan struct{}), errc: make(chan error, len(srcs)), srcs: srcs, logger: logger}
	for _, s := range srcs {
		logger.Info("ledger: consuming OrderPaid events", append([]any{"broker", s.broker}, s.desc...)...)
		// Not ctx: the signal that ends ctx must let the batch in hand finish, in stop.
		if err := s.c.Start(context.WithoutCancel(ctx)); err != nil {
			c.errc <- fmt.Errorf("%s consumer: %w", s.broker, err)
			continue
		}
		c.started = append(c.started, s)
		c.wg.Go(func() {
			select {
			case <-s.c.Done():
				err := s.c.Stop(context.Background()) // why it stopped
				if err == nil {
					err = errors.New("stopped")
				}
				c.errc <- fmt.Errorf("%s consumer: %w", s.broker, err)
			case <-c.stopping:
			}
		})
	}
	return c
}

// Err returns a channel receiving a consumer's failure (nil channel with no sources).
func (c *consuming) Err() <-chan error {
	if len(c.srcs) == 0 {
		return nil
	}
	return c.errc
}

// stop stops the consumers (each finishes and acknowledges the batch in hand, or gives it up after
// 15s: the broker then delivers it again) and closes their connections.
func (c *consuming) stop() {
	close(c.stopping)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for _, s := range c.started {
		if err := s.c.Stop(ctx); err != nil {
			c.logger.Warn("ledger: stopping a consumer", "broker", s.broker, "err", err)
		}
	}
	c.wg.Wait()
	for _, s := range c.srcs {
		st := s.c.Stats()
		c.logger.Info("ledger: stopped consuming", "broker", s.broker, "records", st.Records, "inserted", st.Inserted,
			"duplicates", st.Duplicates, "conflicts", st.Conflicts, "undecodable", st.Undecodable, "failed_batches", st.Failures)
	}
	closeSources(c.srcs)
}
