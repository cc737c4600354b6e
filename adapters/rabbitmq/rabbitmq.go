// Package rabbitmq consumes a RabbitMQ (AMQP 0-9-1) queue into a txinbox inbox.
//
// Each batch of deliveries is stored in one transaction (adapters.Sink.Store) and then acknowledged
// with one multiple ack up to its last delivery tag. If the database cannot be reached the batch is
// not acknowledged: after RetryDelay it is rejected with requeue, and the broker delivers it again. A
// crash or a lost connection before the ack makes the broker redeliver what it had delivered, and the
// inbox rejects the copies already stored as duplicates.
package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/adapters"
	"github.com/txinbox/txinbox/adapters/internal/run"
)

// Config configures a Consumer. URL, Queue, Sink.DB and Sink.Consumer are required; every other zero
// field takes the documented default.
type Config struct {
	// URL is the broker address, "amqp://user:password@host:5672/vhost".
	URL string
	// AMQP tunes the connection (TLS, heartbeat, dialer, client properties). Its zero value is what
	// amqp091.Dial uses: 10s heartbeat, 30s connection timeout.
	AMQP amqp.Config
	// Queue is the queue to consume. It must exist, unless Setup declares it.
	Queue string
	// Setup, if set, runs on every new channel before consuming (after each reconnect too): declare
	// the queue, exchanges and bindings there. An error drops the connection and is retried.
	Setup func(ch *amqp.Channel) error
	// ConsumerTag names this consumer in the broker. Default: "" (the broker picks one).
	ConsumerTag string
	// Sink says where messages are stored and how deliveries become messages. The kind is the
	// delivery's type property, else the Sink.KindHeader header, else Sink.DefaultKind. Sink.Key
	// default: the message-id property, else the x-idempotency-key header
	// (adapters.FirstOf(adapters.MessageID(), adapters.Header(adapters.IdempotencyKeyHeader))); a
	// delivery with neither is stored dead. Sink.Logger default: Logger.
	Sink adapters.SinkConfig
	// BatchSize is the most deliveries stored and acknowledged together. Default:
	// adapters.DefaultBatchSize (100).
	BatchSize int
	// Prefetch is the channel's prefetch count (basic.qos): deliveries in flight, unacknowledged. It
	// is raised to BatchSize if lower. Default: 2 × BatchSize.
	Prefetch int
	// BatchWait is how long a batch waits for more deliveries after its first. Default:
	// adapters.DefaultBatchWait (20ms).
	BatchWait time.Duration
	// RetryDelay is how long a batch that could not be stored is held before it is rejected with
	// requeue; it doubles after each failure in a row, up to MaxRetryDelay. It is also the first delay
	// before reconnecting. Default: adapters.DefaultRetryDelay (1s).
	RetryDelay time.Duration
	// MaxRetryDelay caps RetryDelay and the reconnect delay. Default: adapters.DefaultMaxRetryDelay (30s).
	MaxRetryDelay time.Duration
	// WriteTimeout bounds storing one batch. Default: adapters.DefaultWriteTimeout (30s).
	WriteTimeout time.Duration
	// ShutdownTimeout bounds how long the batch in hand may still take to be stored and acknowledged
	// once Run's context ended. Default: adapters.DefaultShutdownTimeout (10s).
	ShutdownTimeout time.Duration
	// Logger receives connection and storage errors. Default: slog.Default().
	Logger *slog.Logger
}

// Consumer consumes one queue into the inbox. Make it with New and start it with Run.
type Consumer struct {
	cfg  Config
	sink *adapters.Sink

	// afterStore, if set (by tests), runs after a batch committed and before it is acknowledged; an
	// error makes Run return it at once, as if the process had crashed.
	afterStore func(batch, size int) error
}

// New checks cfg and returns a Consumer.
func New(cfg Config) (*Consumer, error) {
	if cfg.URL == "" {
		return nil, &txinbox.ConfigError{Field: "URL", Reason: "required"}
	}
	if cfg.Queue == "" {
		return nil, &txinbox.ConfigError{Field: "Queue", Reason: "required"}
	}
	if cfg.BatchSize < 0 || cfg.Prefetch < 0 || cfg.BatchWait < 0 || cfg.RetryDelay < 0 || cfg.MaxRetryDelay < 0 ||
		cfg.WriteTimeout < 0 || cfg.ShutdownTimeout < 0 {
		return nil, &txinbox.ConfigError{Field: "BatchSize", Reason: "sizes and durations must not be negative"}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Sink.Logger == nil {
		cfg.Sink.Logger = cfg.Logger
	}
	if cfg.Sink.Key == nil {
		cfg.Sink.Key = adapters.FirstOf(adapters.MessageID(), adapters.Header(adapters.IdempotencyKeyHeader))
	}
	def := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = adapters.DefaultBatchSize
	}
	if cfg.Prefetch == 0 {
		cfg.Prefetch = 2 * cfg.BatchSize
	}
	cfg.Prefetch = max(cfg.Prefetch, cfg.BatchSize)
	def(&cfg.BatchWait, adapters.DefaultBatchWait)
	def(&cfg.RetryDelay, adapters.DefaultRetryDelay)
	def(&cfg.MaxRetryDelay, adapters.DefaultMaxRetryDelay)
	def(&cfg.WriteTimeout, adapters.DefaultWriteTimeout)
	def(&cfg.ShutdownTimeout, adapters.DefaultShutdownTimeout)
	sink, err := adapters.NewSink(cfg.Sink)
	if err != nil {
		return nil, err
	}
	cfg.Sink = sink.Config()
	return &Consumer{cfg: cfg, sink: sink}, nil
}

// Stats returns what the consumer did so far.
func (c *Consumer) Stats() adapters.Stats { return c.sink.Stats() }

// errLost says the connection or channel closed under the consumer.
var errLost = errors.New("txinbox/rabbitmq: connection or channel closed")

type crashError struct{ err error }

func (e crashError) Error() string { return e.err.Error() }
func (e crashError) Unwrap() error { return e.err }

// Run consumes until ctx ends, then finishes the batch in hand (stores and acknowledges it, within
// ShutdownTimeout), closes its connection and returns nil; deliveries prefetched but not yet in a batch
// go back to the queue. A lost connection is re-established after a delay (RetryDelay, doubling up to
// MaxRetryDelay), so Run returns nothing else.
func (c *Consumer) Run(ctx context.Context) error {
	reconnect := run.Backoff{Base: c.cfg.RetryDelay, Max: c.cfg.MaxRetryDelay}
	for {
		consumed, err := c.session(ctx)
		if ctx.Err() != nil {
			return nil //nolint:nilerr // documented: Run returns nil once ctx ends, whatever ended the session
		}
		var crash crashError
		if errors.As(err, &crash) {
			return crash.err
		}
		if consumed {
			reconnect.Reset()
		}
		d := reconnect.Next()
		c.cfg.Logger.Warn("txinbox/rabbitmq: connection lost; reconnecting", "queue", c.cfg.Queue, "err", err, "delay", d)
		if !run.Sleep(ctx, d) {
			return nil
		}
	}
}

// session consumes over one connection until ctx ends or the connection fails. consumed reports
// whether it got as far as consuming.
func (c *Consumer) session(ctx context.Context) (consumed bool, err error) {
	conn, err := amqp.DialConfig(c.cfg.URL, c.cfg.AMQP)
	if err != nil {
		return false, fmt.Errorf("dial: %w", err)
	}
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	if err != nil {
		return false, fmt.Errorf("channel: %w", err)
	}
	if c.cfg.Setup != nil {
		if err := c.cfg.Setup(ch); err != nil {
			return false, fmt.Errorf("setup: %w", err)
		}
	}
	if err := ch.Qos(c.cfg.Prefetch, 0, false); err != nil {
		return false, fmt.Errorf("qos: %w", err)
	}
	deliveries, err := ch.Consume(c.cfg.Queue, c.cfg.ConsumerTag, false, false, false, false, nil)
	if err != nil {
		return false, fmt.Errorf("consume %s: %w", c.cfg.Queue, err)
	}
	retry := run.Backoff{Base: c.cfg.RetryDelay, Max: c.cfg.MaxRetryDelay}
	for n := 1; ; n++ {
		batch, err := c.collect(ctx, deliveries)
		if err != nil {
			return true, err
		}
		if len(batch) == 0 {
			return true, nil // ctx ended
		}
		if err := c.handle(ctx, ch, batch, n, &retry); err != nil {
			return true, err
		}
		if ctx.Err() != nil {
			return true, nil
		}
	}
}

// collect waits for a first delivery, then gathers more until BatchSize, BatchWait or the end of ctx.
// It returns no deliveries when ctx ended first.
func (c *Consumer) collect(ctx context.Context, deliveries <-chan amqp.Delivery) ([]amqp.Delivery, error) {
	var batch []amqp.Delivery
	select {
	case <-ctx.Done():
		return nil, nil
	case d, ok := <-deliveries:
		if !ok {
			return nil, errLost
		}
		batch = append(batch, d)
	}
	timer := time.NewTimer(c.cfg.BatchWait)
	defer timer.Stop()
	for len(batch) < c.cfg.BatchSize {
		select {
		case d, ok := <-deliveries:
			if !ok {
				return nil, errLost // their delivery tags died with the channel: they will be redelivered
			}
			batch = append(batch, d)
		case <-timer.C:
			return batch, nil
		case <-ctx.Done():
			return batch, nil
		}
	}
	return batch, nil
}

// handle stores batch and acknowledges it, or, if it cannot be stored, rejects it with requeue after
// the retry delay.
func (c *Consumer) handle(ctx context.Context, ch *amqp.Channel, batch []amqp.Delivery, n int, retry *run.Backoff) error {
	recs := make([]*adapters.Record, len(batch))
	for i := range batch {
		recs[i] = record(c.cfg.Queue, &batch[i])
	}
	last := batch[len(batch)-1].DeliveryTag
	wctx, cancel := run.WriteContext(ctx, c.cfg.WriteTimeout, c.cfg.ShutdownTimeout)
	defer cancel()
	if _, err := c.sink.Store(wctx, recs); err != nil {
		d := retry.Next()
		c.cfg.Logger.Error("txinbox/rabbitmq: cannot store batch; it will be requeued", "queue", c.cfg.Queue,
			"messages", len(batch), "err", err, "delay", d)
		if !run.Sleep(ctx, d) {
			return nil // shutting down: closing the channel requeues the batch
		}
		if err := ch.Nack(last, true, true); err != nil {
			return fmt.Errorf("nack: %w", err)
		}
		return nil
	}
	retry.Reset()
	if c.afterStore != nil {
		if err := c.afterStore(n, len(batch)); err != nil {
			return crashError{err}
		}
	}
	if err := ch.Ack(last, true); err != nil {
		return fmt.Errorf("ack: %w", err)
	}
	c.sink.CountAcked(len(batch))
	return nil
}

// record turns a delivery into a Record: headers as text (see run.Text), the message-id and type
// properties, and no offset (RabbitMQ has no stable position).
func record(queue string, d *amqp.Delivery) *adapters.Record {
	h := make(map[string]string, len(d.Headers))
	for k, v := range d.Headers {
		if s, ok := run.Text(v); ok {
			h[k] = s
		}
	}
	return &adapters.Record{Source: queue, Offset: -1, MessageID: d.MessageId, Type: d.Type, Headers: h, Body: d.Body, Raw: *d}
}
