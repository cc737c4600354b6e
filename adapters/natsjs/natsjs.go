// Package natsjs consumes a NATS JetStream pull consumer into a txinbox inbox.
//
// Each batch of messages is stored in one transaction (adapters.Sink.Store), and each message is
// acknowledged after that transaction committed. If the database cannot be reached, every message of
// the batch is negatively acknowledged with a delay (NakWithDelay), and JetStream delivers it again
// after it. A crash or a lost connection before the acks makes JetStream redeliver the batch after the
// consumer's AckWait, and the inbox rejects the copies already stored as duplicates.
//
// The other way round, a [Publisher] publishes the events of a txinbox outbox (package outbox) to
// JetStream: each event's id is its message's Nats-Msg-Id, and an event is acknowledged to the relay
// only once JetStream answered with a PubAck.
//
// Each event travels as a CloudEvent in the binary content mode of the NATS protocol binding: ce-
// headers (ce-id, ce-source, ce-type, ce-time, ce-datacontenttype, ce-partitionkey, ce-traceparent,
// ...), percent-encoded. A Consumer reads them back (adapters.Record.CloudEvent), so that a Publisher
// → Consumer pair needs no key, kind or ordering configuration: the key is ce-id, the kind ce-type,
// the ordering key ce-partitionkey (see adapters.Sink.Store).
package natsjs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/adapters"
	"github.com/txinbox/txinbox/adapters/internal/envelope"
	"github.com/txinbox/txinbox/adapters/internal/run"
)

// MsgIDHeader is the JetStream message id header (publish deduplication); its value is
// adapters.Record.MessageID.
const MsgIDHeader = "Nats-Msg-Id"

// Config configures a Consumer. Consumer, Sink.Store.DB and Sink.Consumer are required; every other zero
// field takes the documented default. New returns an *inbox.ConfigError naming the field that is
// missing or negative.
type Config struct {
	// Consumer is the JetStream pull consumer to read, with AckPolicy AckExplicitPolicy (the
	// default). Its AckWait is how long a message delivered to a consumer that died stays invisible
	// before it is redelivered; its MaxDeliver must stay unlimited (-1, the default), or a message that
	// cannot be stored while the database is down could be dropped by JetStream.
	Consumer jetstream.Consumer
	// Sink says where messages are stored and how they become inbox messages. The kind is the
	// CloudEvents type (ce-type), else the Sink.KindHeader header, else Sink.DefaultKind; the ordering
	// key, unless Sink.OrderingKey is set, the CloudEvents partitionkey. Sink.Key default: the
	// CloudEvents id (ce-id, with ce-specversion), else the Nats-Msg-Id header, else the
	// x-idempotency-key header (adapters.FirstOf(adapters.CloudEventID(), adapters.MessageID(),
	// adapters.Header(adapters.IdempotencyKeyHeader))); a message with none is stored dead.
	// adapters.Coordinates() keys by stream sequence instead. Sink.Logger default:
	// BatchConfig.Logger.
	Sink adapters.SinkConfig
	// Prefetch is how many messages the client keeps requested ahead (jetstream.PullMaxMessages). It
	// is raised to BatchSize if lower. Default: 2 × BatchSize.
	Prefetch int
	// BatchConfig holds the batch size, waits, retry delays, write timeout and logger, with their
	// defaults.
	adapters.BatchConfig
}

// Consumer consumes one JetStream consumer into the inbox. Make it with [New], start it with
// [Consumer.Start] and stop it with [Consumer.Stop].
type Consumer struct {
	cfg  Config
	sink *adapters.Sink
	loop run.Loop

	// afterStore, if set (by tests), runs after a batch committed and before it is acknowledged; an
	// error ends the loop at once, as if the process had crashed (Stop returns it).
	afterStore func(batch, size int) error
}

// New checks cfg and returns a Consumer.
func New(cfg Config) (*Consumer, error) {
	if cfg.Consumer == nil {
		return nil, &txinbox.ConfigError{Field: "Consumer", Reason: "required"}
	}
	sink, err := run.Setup(&cfg.BatchConfig, &cfg.Sink,
		adapters.FirstOf(adapters.CloudEventID(), adapters.MessageID(), adapters.Header(adapters.IdempotencyKeyHeader)),
		run.Size{Field: "Prefetch", Value: cfg.Prefetch})
	if err != nil {
		return nil, err
	}
	cfg.Prefetch = run.Prefetch(cfg.Prefetch, cfg.BatchSize)
	return &Consumer{cfg: cfg, sink: sink, loop: run.Loop{Name: "txinbox/natsjs"}}, nil
}

// Stats returns what the consumer did so far.
func (c *Consumer) Stats() adapters.Stats { return c.sink.Stats() }

// Start starts pulling from the JetStream consumer (an error if it cannot: the connection is closed,
// the consumer deleted) and returns; in the background the consumer stores and acknowledges batches
// until [Consumer.Stop] is called or ctx ends. Disconnections are ridden out by the NATS client; if
// consuming becomes impossible the consumer stops on its own: [Consumer.Done] is closed and Stop
// returns why. A second Start returns an error matching [adapters.ErrAlreadyStarted].
//
// When ctx ends, the consumer stops as with Stop on an ended context: the batch in hand is abandoned.
// To let it finish on SIGTERM, pass a ctx that outlives the signal and call Stop when it comes.
func (c *Consumer) Start(ctx context.Context) error {
	return c.loop.Start(ctx, func(context.Context) (run.Body, error) {
		it, err := c.cfg.Consumer.Messages(jetstream.PullMaxMessages(c.cfg.Prefetch))
		if err != nil {
			return nil, fmt.Errorf("consume: %w", err)
		}
		return func(ctx, abort context.Context) error {
			defer c.release(it)
			return c.consume(ctx, abort, it)
		}, nil
	})
}

// Stop stops pulling, finishes the batch in hand (stores and acknowledges it), negatively
// acknowledges the messages it had prefetched so that JetStream delivers them again at once, and
// returns nil. If ctx ends first, it returns at once an error wrapping ctx.Err(), and the batch in
// hand is abandoned: JetStream delivers it again after AckWait (the inbox drops what was stored). If
// consuming had ended on its own, Stop returns why. Stop returns the same result on every call, and
// nil before Start.
func (c *Consumer) Stop(ctx context.Context) error { return c.loop.Stop(ctx) }

// Done returns a channel closed once the consumer stopped: after [Consumer.Stop] or the end of
// Start's context, or when consuming ended on its own (Stop then returns why).
func (c *Consumer) Done() <-chan struct{} { return c.loop.Done() }

// consume collects and handles batches until ctx ends or the iterator closes.
func (c *Consumer) consume(ctx, abort context.Context, it jetstream.MessagesContext) error {
	retry := run.Backoff{Base: c.cfg.RetryDelay, Max: c.cfg.MaxRetryDelay}
	for n := 1; ; n++ {
		batch, err := c.collect(ctx, it)
		if len(batch) > 0 {
			if herr := c.handle(ctx, abort, batch, n, &retry); herr != nil {
				return herr
			}
		}
		if err != nil {
			return fmt.Errorf("txinbox/natsjs: consume: %w", err)
		}
		if run.Stopped(ctx) {
			return nil
		}
	}
}

// collect waits for a first message, then gathers more until BatchSize, BatchWait or the end of ctx.
// It returns no messages and no error when ctx ended first, and an error when the iterator closed.
func (c *Consumer) collect(ctx context.Context, it jetstream.MessagesContext) ([]jetstream.Msg, error) {
	var batch []jetstream.Msg
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err == nil {
			batch = append(batch, m)
			break
		}
		if ctx.Err() != nil {
			return nil, nil
		}
		if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
			return nil, err
		}
		c.cfg.Logger.Warn("txinbox/natsjs: consume", "err", err)
	}
	bctx, cancel := context.WithTimeout(ctx, c.cfg.BatchWait)
	defer cancel()
	for len(batch) < c.cfg.BatchSize {
		m, err := it.Next(jetstream.NextContext(bctx))
		if err != nil {
			if bctx.Err() != nil {
				return batch, nil
			}
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return batch, err
			}
			c.cfg.Logger.Warn("txinbox/natsjs: consume", "err", err)
			continue
		}
		batch = append(batch, m)
	}
	return batch, nil
}

// handle stores batch and acknowledges each message, or, if it cannot be stored, acknowledges each
// negatively with the retry delay.
func (c *Consumer) handle(ctx, abort context.Context, batch []jetstream.Msg, n int, retry *run.Backoff) error {
	recs := make([]*adapters.Record, len(batch))
	for i, m := range batch {
		recs[i] = record(m)
	}
	wctx, cancel := context.WithTimeout(abort, c.cfg.WriteTimeout)
	defer cancel()
	if _, err := c.sink.Store(wctx, recs); err != nil {
		d := retry.Next()
		c.cfg.Logger.Error("txinbox/natsjs: cannot store batch; it will be redelivered", "messages", len(batch), "err", err, "delay", d)
		for _, m := range batch {
			if err := m.NakWithDelay(d); err != nil {
				c.cfg.Logger.Warn("txinbox/natsjs: nak failed; JetStream redelivers after AckWait", "err", err)
				break
			}
		}
		// Pace the loop too: the prefetched messages would fail the same way at once.
		run.Sleep(ctx, d)
		return nil
	}
	retry.Reset()
	if c.afterStore != nil {
		if err := c.afterStore(n, len(batch)); err != nil {
			return err
		}
	}
	acked := 0
	for _, m := range batch {
		if err := m.Ack(); err != nil {
			c.cfg.Logger.Warn("txinbox/natsjs: ack failed; JetStream redelivers after AckWait, and the inbox drops the copy",
				"messages", len(batch)-acked, "err", err)
			break
		}
		acked++
	}
	c.sink.CountAcked(acked)
	return nil
}

// release stops pulling and negatively acknowledges what was prefetched but not handled, so that it
// is delivered again at once rather than after AckWait.
func (c *Consumer) release(it jetstream.MessagesContext) {
	it.Drain()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return
		}
		_ = m.Nak()
	}
}

// record turns a message into a Record: the first value of each header, the Nats-Msg-Id header as
// MessageID, the ce- headers as CloudEvent (the NATS binding of CloudEvents), the stream as Source and
// the stream sequence as Offset.
func record(m jetstream.Msg) *adapters.Record {
	h := make(map[string]string, len(m.Headers()))
	for k, vs := range m.Headers() {
		if len(vs) > 0 {
			h[k] = vs[0]
		}
	}
	r := &adapters.Record{Offset: -1, MessageID: h[MsgIDHeader], Headers: h, CloudEvent: envelope.NATS.Attributes(h), Body: m.Data(), Raw: m}
	if md, err := m.Metadata(); err == nil {
		r.Source = md.Stream
		r.Offset = int64(md.Sequence.Stream)
	}
	return r
}
