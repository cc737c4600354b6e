// Package rabbitmq consumes a RabbitMQ (AMQP 0-9-1) queue into a txinbox inbox.
//
// Each batch of deliveries is stored in one transaction (adapters.Sink.Store) and then acknowledged
// with one multiple ack up to its last delivery tag. If the database cannot be reached the batch is
// not acknowledged: it stays in hand and is stored again after RetryDelay, so that no later delivery
// is stored before it. A crash or a lost connection before the ack makes the broker redeliver what it
// had delivered, and the inbox rejects the copies already stored as duplicates.
//
// One Consumer stores the deliveries of its queue in the order they come, one batch after the other,
// so a worker.Pool runs the messages of an ordering key in queue order, through database outages. What
// a crash, a lost connection or Stop leaves unacknowledged goes back to the queue, and RabbitMQ
// delivers it again in its original place (classic queues) before newer messages. Several consumers
// of one queue share its messages with no order between them.
//
// The other way round, a [Publisher] publishes the events of a txinbox outbox (package outbox) with
// publisher confirms: each event's id is its message's message-id, and an event is acknowledged to
// the relay only once the broker confirmed its message.
//
// Each event travels as a CloudEvent in the binary content mode of the AMQP protocol binding: its
// attributes as cloudEvents_ headers (cloudEvents_id, cloudEvents_source, cloudEvents_type,
// cloudEvents_time, cloudEvents_partitionkey, cloudEvents_traceparent, ...: AMQP 0-9-1 has headers
// where AMQP 1.0, which the binding is written for, has application properties), datacontenttype as
// the content-type property. A Consumer reads them back (adapters.Record.CloudEvent), so that a
// Publisher → Consumer pair needs no key, kind or ordering configuration: the key is cloudEvents_id,
// the kind cloudEvents_type, the ordering key cloudEvents_partitionkey (see adapters.Sink.Store).
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
	"github.com/txinbox/txinbox/adapters/internal/envelope"
	"github.com/txinbox/txinbox/adapters/internal/run"
)

// Config configures a Consumer. URL, Queue, Sink.Store.DB and Sink.Consumer are required; every other zero
// field takes the documented default. New returns an *txinbox.ConfigError naming the field that is
// missing or negative.
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
	// CloudEvents type (cloudEvents_type, with cloudEvents_specversion), else the delivery's type
	// property, else the Sink.KindHeader header, else Sink.DefaultKind; the ordering key, unless
	// Sink.OrderingKey is set, the CloudEvents partitionkey. Sink.Key default: the CloudEvents id
	// (cloudEvents_id), else the message-id property, else the x-idempotency-key header
	// (adapters.FirstOf(adapters.CloudEventID(), adapters.MessageID(),
	// adapters.Header(adapters.IdempotencyKeyHeader))); a delivery with none is stored dead.
	// The consumer logs to Sink.Store's Logger.
	Sink adapters.SinkConfig
	// Prefetch is the channel's prefetch count (basic.qos): deliveries in flight, unacknowledged. It
	// is raised to BatchSize if lower. Default: 2 × BatchSize.
	Prefetch int
	// BatchConfig holds the batch size, waits, retry delays and write timeout, with their
	// defaults; RetryDelay, doubling up to MaxRetryDelay, is also the delay before reconnecting.
	adapters.BatchConfig
}

// Consumer consumes one queue into the inbox. Make it with [New], start it with [Consumer.Start]
// and stop it with [Consumer.Stop].
type Consumer struct {
	cfg  Config
	sink *adapters.Sink
	log  *slog.Logger // the Sink's Store's Logger
	loop run.Loop

	// afterStore, if set (by tests), runs after a batch committed and before it is acknowledged; an
	// error ends the loop at once, as if the process had crashed (Stop returns it).
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
	sink, err := run.Setup(&cfg.BatchConfig, &cfg.Sink,
		adapters.FirstOf(adapters.CloudEventID(), adapters.MessageID(), adapters.Header(adapters.IdempotencyKeyHeader)),
		run.Size{Field: "Prefetch", Value: cfg.Prefetch})
	if err != nil {
		return nil, err
	}
	cfg.Prefetch = run.Prefetch(cfg.Prefetch, cfg.BatchSize)
	return &Consumer{cfg: cfg, sink: sink, log: cfg.Sink.Store.Logger, loop: run.Loop{Name: "txinbox/rabbitmq"}}, nil
}

// Stats returns what the consumer did so far.
func (c *Consumer) Stats() adapters.Stats { return c.sink.Stats() }

// errLost says the connection or channel closed under the consumer.
var errLost = errors.New("txinbox/rabbitmq: connection or channel closed")

type crashError struct{ err error }

func (e crashError) Error() string { return e.err.Error() }
func (e crashError) Unwrap() error { return e.err }

// Start connects, opens a channel, runs Setup and starts consuming the queue, and returns the error
// of the first of these steps that failed (nothing is then started, and Start may be called again).
// In the background the consumer stores and acknowledges batches until [Consumer.Stop] is called or
// ctx ends. A connection lost later is re-established after a delay (RetryDelay, doubling up to
// MaxRetryDelay), with Setup run again. A second Start returns an error matching
// [adapters.ErrAlreadyStarted].
//
// When ctx ends, the consumer stops as with Stop on an ended context: the batch in hand is abandoned.
// To let it finish on SIGTERM, pass a ctx that outlives the signal and call Stop when it comes.
func (c *Consumer) Start(ctx context.Context) error {
	return c.loop.Start(ctx, func(context.Context) (run.Body, error) {
		first, err := c.connect()
		if err != nil {
			return nil, err
		}
		return func(ctx, abort context.Context) error { return c.consume(ctx, abort, first) }, nil
	})
}

// Stop stops consuming, finishes the batch in hand (stores and acknowledges it), closes the
// connection and returns nil; deliveries prefetched but not yet in a batch go back to the queue, and
// so does a batch held because it could not be stored. If
// ctx ends first, it returns at once an error wrapping ctx.Err(), and the batch in hand is abandoned:
// unacknowledged, it goes back to the queue when the connection closes (the inbox drops what was
// stored). Stop returns the same result on every call, and nil before Start.
func (c *Consumer) Stop(ctx context.Context) error { return c.loop.Stop(ctx) }

// Done returns a channel closed once the consumer stopped: after [Consumer.Stop] or the end of
// Start's context (a lost connection does not stop it: it reconnects).
func (c *Consumer) Done() <-chan struct{} { return c.loop.Done() }

// consume runs sessions, the first over first, reconnecting after a lost connection, until ctx ends.
func (c *Consumer) consume(ctx, abort context.Context, first *session) error {
	reconnect := run.Backoff{Base: c.cfg.RetryDelay, Max: c.cfg.MaxRetryDelay}
	s := first
	for {
		var err error
		if s == nil {
			s, err = c.connect()
		}
		if err == nil {
			reconnect.Reset()
			err = c.run(ctx, abort, s)
			_ = s.conn.Close()
			s = nil
		}
		if ctx.Err() != nil {
			return nil //nolint:nilerr // documented: consuming ends with nil once stopped, whatever ended the session
		}
		var crash crashError
		if errors.As(err, &crash) {
			return crash.err
		}
		d := reconnect.Next()
		c.log.Warn("txinbox/rabbitmq: connection lost; reconnecting", "queue", c.cfg.Queue, "err", err, "delay", d)
		if !run.Sleep(ctx, d) {
			return nil
		}
	}
}

// session is one connection consuming the queue.
type session struct {
	conn       *amqp.Connection
	ch         *amqp.Channel
	deliveries <-chan amqp.Delivery
}

// connect dials, opens a channel, runs Setup and starts consuming.
func (c *Consumer) connect() (*session, error) {
	conn, err := amqp.DialConfig(c.cfg.URL, c.cfg.AMQP)
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	fail := func(step string, err error) (*session, error) {
		_ = conn.Close()
		return nil, fmt.Errorf("%s: %w", step, err)
	}
	ch, err := conn.Channel()
	if err != nil {
		return fail("channel", err)
	}
	if c.cfg.Setup != nil {
		if err := c.cfg.Setup(ch); err != nil {
			return fail("setup", err)
		}
	}
	if err := ch.Qos(c.cfg.Prefetch, 0, false); err != nil {
		return fail("qos", err)
	}
	deliveries, err := ch.Consume(c.cfg.Queue, c.cfg.ConsumerTag, false, false, false, false, nil)
	if err != nil {
		return fail("consume "+c.cfg.Queue, err)
	}
	return &session{conn: conn, ch: ch, deliveries: deliveries}, nil
}

// run consumes over s until ctx ends or the connection fails.
func (c *Consumer) run(ctx, abort context.Context, s *session) error {
	retry := run.Backoff{Base: c.cfg.RetryDelay, Max: c.cfg.MaxRetryDelay}
	for n := 1; ; n++ {
		batch, err := c.collect(ctx, s.deliveries)
		if err != nil {
			return err
		}
		if len(batch) == 0 {
			return nil // ctx ended
		}
		if err := c.handle(ctx, abort, s.ch, batch, n, &retry); err != nil {
			return err
		}
		if run.Stopped(ctx) {
			return nil
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

// handle stores batch and acknowledges it. While the batch cannot be stored it holds it, unacknowledged:
// it waits the retry delay and stores it again, so that no later delivery is stored before it. If ctx
// ends first, it returns nil with the batch unacknowledged: closing the channel gives it back to the
// queue.
func (c *Consumer) handle(ctx, abort context.Context, ch *amqp.Channel, batch []amqp.Delivery, n int, retry *run.Backoff) error {
	for {
		recs := make([]*adapters.Record, len(batch))
		for i := range batch {
			recs[i] = record(c.cfg.Queue, &batch[i])
		}
		wctx, cancel := context.WithTimeout(abort, c.cfg.WriteTimeout)
		_, err := c.sink.Store(wctx, recs)
		cancel()
		if err == nil {
			break
		}
		d := retry.Next()
		c.log.Error("txinbox/rabbitmq: cannot store batch; holding it and storing it again", "queue", c.cfg.Queue,
			"messages", len(batch), "err", err, "delay", d)
		if !run.Hold(ctx, d, nil, 0) {
			return nil // shutting down: closing the channel requeues the batch
		}
	}
	retry.Reset()
	if c.afterStore != nil {
		if err := c.afterStore(n, len(batch)); err != nil {
			return crashError{err}
		}
	}
	if err := ch.Ack(batch[len(batch)-1].DeliveryTag, true); err != nil {
		return fmt.Errorf("ack: %w", err)
	}
	c.sink.CountAcked(len(batch))
	return nil
}

// record turns a delivery into a Record: headers as text (see run.Text), the message-id and type
// properties, the cloudEvents_ headers and the content-type property as CloudEvent (the AMQP binding
// of CloudEvents, application properties being headers in AMQP 0-9-1), and no offset (RabbitMQ has no
// stable position).
func record(queue string, d *amqp.Delivery) *adapters.Record {
	h := make(map[string]string, len(d.Headers))
	for k, v := range d.Headers {
		if s, ok := run.Text(v); ok {
			h[k] = s
		}
	}
	ce := envelope.AMQP.Attributes(h)
	if ce != nil && d.ContentType != "" {
		ce[envelope.AttrDataContentType] = d.ContentType
	}
	return &adapters.Record{Source: queue, Offset: -1, MessageID: d.MessageId, Type: d.Type, Headers: h, CloudEvent: ce, Body: d.Body, Raw: *d}
}
