// Package natsjs consumes a NATS JetStream pull consumer into a txinbox inbox.
//
// Each batch of messages is stored in one transaction (adapters.Sink.Store), and each message is
// acknowledged after that transaction committed. If the database cannot be reached, every message of
// the batch is negatively acknowledged with a delay (NakWithDelay), and JetStream delivers it again
// after it. A crash or a lost connection before the acks makes JetStream redeliver the batch after the
// consumer's AckWait, and the inbox rejects the copies already stored as duplicates.
package natsjs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/adapters"
	"github.com/txinbox/txinbox/adapters/internal/run"
)

// MsgIDHeader is the JetStream message id header (publish deduplication); its value is
// adapters.Record.MessageID.
const MsgIDHeader = "Nats-Msg-Id"

// Config configures a Consumer. Consumer, Sink.DB and Sink.Consumer are required; every other zero
// field takes the documented default.
type Config struct {
	// Consumer is the JetStream pull consumer to read, with AckPolicy AckExplicitPolicy (the
	// default). Its AckWait is how long a message delivered to a consumer that died stays invisible
	// before it is redelivered; its MaxDeliver must stay unlimited (-1, the default), or a message that
	// cannot be stored while the database is down could be dropped by JetStream.
	Consumer jetstream.Consumer
	// Sink says where messages are stored and how they become inbox messages. The kind is the
	// Sink.KindHeader header, else Sink.DefaultKind. Sink.Key default: the Nats-Msg-Id header, else
	// the x-idempotency-key header (adapters.FirstOf(adapters.MessageID(),
	// adapters.Header(adapters.IdempotencyKeyHeader))); a message with neither is stored dead.
	// adapters.Coordinates() keys by stream sequence instead. Sink.Logger default: Logger.
	Sink adapters.SinkConfig
	// BatchSize is the most messages stored together. Default: adapters.DefaultBatchSize (100).
	BatchSize int
	// Prefetch is how many messages the client keeps requested ahead (jetstream.PullMaxMessages). It
	// is raised to BatchSize if lower. Default: 2 × BatchSize.
	Prefetch int
	// BatchWait is how long a batch waits for more messages after its first. Default:
	// adapters.DefaultBatchWait (20ms).
	BatchWait time.Duration
	// RetryDelay is the delay of the negative acknowledgement of a batch that could not be stored; it
	// doubles after each failure in a row, up to MaxRetryDelay. Default: adapters.DefaultRetryDelay (1s).
	RetryDelay time.Duration
	// MaxRetryDelay caps RetryDelay. Default: adapters.DefaultMaxRetryDelay (30s).
	MaxRetryDelay time.Duration
	// WriteTimeout bounds storing one batch. Default: adapters.DefaultWriteTimeout (30s).
	WriteTimeout time.Duration
	// ShutdownTimeout bounds how long the batch in hand may still take to be stored and acknowledged
	// once Run's context ended. Default: adapters.DefaultShutdownTimeout (10s).
	ShutdownTimeout time.Duration
	// Logger receives storage and acknowledgement errors. Default: slog.Default().
	Logger *slog.Logger
}

// Consumer consumes one JetStream consumer into the inbox. Make it with New and start it with Run.
type Consumer struct {
	cfg  Config
	sink *adapters.Sink

	// afterStore, if set (by tests), runs after a batch committed and before it is acknowledged; an
	// error makes Run return it at once, as if the process had crashed.
	afterStore func(batch, size int) error
}

// New checks cfg and returns a Consumer.
func New(cfg Config) (*Consumer, error) {
	if cfg.Consumer == nil {
		return nil, &txinbox.ConfigError{Field: "Consumer", Reason: "required"}
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

// Run consumes until ctx ends, then finishes the batch in hand (stores and acknowledges it, within
// ShutdownTimeout), negatively acknowledges the messages it had prefetched so that JetStream delivers
// them again at once, and returns nil. Disconnections are ridden out by the NATS client; Run returns an
// error if consuming becomes impossible (the connection was closed, the consumer deleted).
func (c *Consumer) Run(ctx context.Context) error {
	it, err := c.cfg.Consumer.Messages(jetstream.PullMaxMessages(c.cfg.Prefetch))
	if err != nil {
		return fmt.Errorf("txinbox/natsjs: consume: %w", err)
	}
	defer c.release(it)
	retry := run.Backoff{Base: c.cfg.RetryDelay, Max: c.cfg.MaxRetryDelay}
	for n := 1; ; n++ {
		batch, err := c.collect(ctx, it)
		if len(batch) > 0 {
			if herr := c.handle(ctx, batch, n, &retry); herr != nil {
				return herr
			}
		}
		if err != nil {
			return fmt.Errorf("txinbox/natsjs: consume: %w", err)
		}
		if ctx.Err() != nil {
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
func (c *Consumer) handle(ctx context.Context, batch []jetstream.Msg, n int, retry *run.Backoff) error {
	recs := make([]*adapters.Record, len(batch))
	for i, m := range batch {
		recs[i] = record(m)
	}
	wctx, cancel := run.WriteContext(ctx, c.cfg.WriteTimeout, c.cfg.ShutdownTimeout)
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
// MessageID, the stream as Source and the stream sequence as Offset.
func record(m jetstream.Msg) *adapters.Record {
	h := make(map[string]string, len(m.Headers()))
	for k, vs := range m.Headers() {
		if len(vs) > 0 {
			h[k] = vs[0]
		}
	}
	r := &adapters.Record{Offset: -1, MessageID: h[MsgIDHeader], Headers: h, Body: m.Data(), Raw: m}
	if md, err := m.Metadata(); err == nil {
		r.Source = md.Stream
		r.Offset = int64(md.Sequence.Stream)
	}
	return r
}
