// Package kafka consumes Kafka topics, as a member of a consumer group, into a txinbox inbox.
//
// Each batch of records is stored in one transaction (adapters.Sink.Store), and its offsets are
// committed after that transaction committed. If the database cannot be reached, the batch stays in
// hand and is stored again after a delay, with nothing committed, until it succeeds or Run stops. A
// crash before the offset commit makes the group resume from the last committed offsets, and the
// inbox rejects the records already stored as duplicates.
//
// The consumer uses github.com/twmb/franz-go with auto-commit disabled and rebalances blocked while a
// batch is in hand (kgo.BlockRebalanceOnPoll), so that it never commits offsets of partitions it no
// longer owns. A batch held while the database is down therefore also holds up rebalances of the
// group; past the group's rebalance timeout the member is dropped, and its partitions resume elsewhere
// from their committed offsets.
package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/adapters"
	"github.com/txinbox/txinbox/adapters/internal/run"
)

// Config configures a Consumer. Options (with a consumer group and topics), Sink.DB and Sink.Consumer
// are required; every other zero field takes the documented default.
type Config struct {
	// Options configure the franz-go client: kgo.SeedBrokers, kgo.ConsumerGroup and kgo.ConsumeTopics
	// are required; TLS, SASL and the like go here too. The consumer adds kgo.DisableAutoCommit and
	// kgo.BlockRebalanceOnPoll.
	Options []kgo.Opt
	// Sink says where records are stored and how they become inbox messages. The kind is the
	// Sink.KindHeader header, else Sink.DefaultKind. Sink.Key default: the x-idempotency-key header,
	// else the record's coordinates "topic:partition:offset"
	// (adapters.FirstOf(adapters.Header(adapters.IdempotencyKeyHeader), adapters.Coordinates())).
	// Coordinates are stable across redeliveries but do not catch a producer that sends the same
	// message twice; adapters.RecordKey() uses the record key, when each message has its own.
	// Sink.Logger default: Logger.
	Sink adapters.SinkConfig
	// BatchSize is the most records stored and committed together. Default: adapters.DefaultBatchSize
	// (100).
	BatchSize int
	// BatchWait is how long a batch waits for more records after its first. Default:
	// adapters.DefaultBatchWait (20ms).
	BatchWait time.Duration
	// RetryDelay is the wait before storing again a batch that could not be stored; it doubles after
	// each failure in a row, up to MaxRetryDelay. Default: adapters.DefaultRetryDelay (1s).
	RetryDelay time.Duration
	// MaxRetryDelay caps RetryDelay. Default: adapters.DefaultMaxRetryDelay (30s).
	MaxRetryDelay time.Duration
	// WriteTimeout bounds storing one batch, and committing its offsets. Default:
	// adapters.DefaultWriteTimeout (30s).
	WriteTimeout time.Duration
	// ShutdownTimeout bounds how long the batch in hand may still take to be stored and committed
	// once Run's context ended. Default: adapters.DefaultShutdownTimeout (10s).
	ShutdownTimeout time.Duration
	// Logger receives storage, commit and fetch errors. Default: slog.Default().
	Logger *slog.Logger
}

// Consumer consumes into the inbox as one member of a consumer group. Make it with New and start it
// with Run.
type Consumer struct {
	cfg  Config
	sink *adapters.Sink

	// afterStore, if set (by tests), runs after a batch committed and before its offsets are
	// committed; an error makes Run return it at once, as if the process had crashed.
	afterStore func(batch, size int) error
}

// New checks cfg and returns a Consumer.
func New(cfg Config) (*Consumer, error) {
	if len(cfg.Options) == 0 {
		return nil, &txinbox.ConfigError{Field: "Options", Reason: "required (seed brokers, consumer group, topics)"}
	}
	if cfg.BatchSize < 0 || cfg.BatchWait < 0 || cfg.RetryDelay < 0 || cfg.MaxRetryDelay < 0 ||
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
		cfg.Sink.Key = adapters.FirstOf(adapters.Header(adapters.IdempotencyKeyHeader), adapters.Coordinates())
	}
	def := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = adapters.DefaultBatchSize
	}
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
	cfg.Options = append(slices.Clip(cfg.Options), kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll())
	return &Consumer{cfg: cfg, sink: sink}, nil
}

// Stats returns what the consumer did so far. Stats.Acked counts records whose offsets were committed.
func (c *Consumer) Stats() adapters.Stats { return c.sink.Stats() }

// Run joins the group with a client of its own and consumes until ctx ends, then finishes the batch
// in hand (stores it and commits its offsets, within ShutdownTimeout), leaves the group and returns
// nil. A batch that could not be stored when ctx ended is left uncommitted. Broker disconnections are
// ridden out by the client; Run returns an error only if the client cannot be made.
func (c *Consumer) Run(ctx context.Context) error {
	cl, err := kgo.NewClient(c.cfg.Options...)
	if err != nil {
		return fmt.Errorf("txinbox/kafka: client: %w", err)
	}
	defer cl.CloseAllowingRebalance()
	retry := run.Backoff{Base: c.cfg.RetryDelay, Max: c.cfg.MaxRetryDelay}
	for n := 1; ; n++ {
		recs := c.poll(ctx, cl)
		if len(recs) > 0 {
			if err := c.handle(ctx, cl, recs, n, &retry); err != nil {
				return err
			}
		}
		cl.AllowRebalance()
		if ctx.Err() != nil {
			return nil
		}
	}
}

// poll waits for records, then gathers more until BatchSize, BatchWait or the end of ctx.
func (c *Consumer) poll(ctx context.Context, cl *kgo.Client) []*kgo.Record {
	recs := c.fetch(ctx, cl, c.cfg.BatchSize)
	if len(recs) == 0 {
		return nil
	}
	bctx, cancel := context.WithTimeout(ctx, c.cfg.BatchWait)
	defer cancel()
	for len(recs) < c.cfg.BatchSize && bctx.Err() == nil {
		recs = append(recs, c.fetch(bctx, cl, c.cfg.BatchSize-len(recs))...)
	}
	return recs
}

func (c *Consumer) fetch(ctx context.Context, cl *kgo.Client, limit int) []*kgo.Record {
	fs := cl.PollRecords(ctx, limit)
	fs.EachError(func(topic string, partition int32, err error) {
		if ctx.Err() == nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, kgo.ErrClientClosed) {
			c.cfg.Logger.Warn("txinbox/kafka: fetch", "topic", topic, "partition", partition, "err", err)
		}
	})
	return fs.Records()
}

// handle stores recs, trying again while the database is unreachable, then commits their offsets.
func (c *Consumer) handle(ctx context.Context, cl *kgo.Client, recs []*kgo.Record, n int, retry *run.Backoff) error {
	rs := make([]*adapters.Record, len(recs))
	for i, r := range recs {
		rs[i] = record(r)
	}
	for {
		wctx, cancel := run.WriteContext(ctx, c.cfg.WriteTimeout, c.cfg.ShutdownTimeout)
		_, err := c.sink.Store(wctx, rs)
		if err == nil {
			retry.Reset()
			if c.afterStore != nil {
				if err := c.afterStore(n, len(recs)); err != nil {
					cancel()
					return err
				}
			}
			if err := cl.CommitRecords(wctx, recs...); err != nil {
				c.cfg.Logger.Warn("txinbox/kafka: offset commit failed; the records will be consumed again and dropped by the inbox as duplicates",
					"records", len(recs), "err", err)
			} else {
				c.sink.CountAcked(len(recs))
			}
			cancel()
			return nil
		}
		cancel()
		d := retry.Next()
		c.cfg.Logger.Error("txinbox/kafka: cannot store batch; retrying it, offsets not committed", "records", len(recs), "err", err, "delay", d)
		if !run.Sleep(ctx, d) {
			return nil // shutting down: uncommitted, consumed again on restart
		}
		// Fresh decode: the Sink fills in Record.Kind and sanitizes headers in place, harmlessly, but
		// start from the broker's record anyway.
		for i, r := range recs {
			rs[i] = record(r)
		}
	}
}

// record turns a Kafka record into a Record: its headers (the last value of a repeated key), key,
// topic, partition and offset.
func record(r *kgo.Record) *adapters.Record {
	h := make(map[string]string, len(r.Headers))
	for _, hd := range r.Headers {
		if s, ok := run.Text(hd.Value); ok {
			h[hd.Key] = s
		}
	}
	return &adapters.Record{Source: r.Topic, Partition: r.Partition, Offset: r.Offset, RecordKey: r.Key, Headers: h, Body: r.Value, Raw: r}
}
