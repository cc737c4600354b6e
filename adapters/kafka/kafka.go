// Package kafka consumes Kafka topics, as a member of a consumer group, into a txinbox inbox.
//
// Each batch of records is stored in one transaction (adapters.Sink.Store), and its offsets are
// committed after that transaction committed. If the database cannot be reached, the batch stays in
// hand and is stored again after a delay, with nothing committed, until it succeeds or the consumer stops. A
// crash before the offset commit makes the group resume from the last committed offsets, and the
// inbox rejects the records already stored as duplicates.
//
// The consumer uses github.com/twmb/franz-go with auto-commit disabled and rebalances blocked while a
// batch is in hand (kgo.BlockRebalanceOnPoll), so that it never commits offsets of partitions it no
// longer owns. A batch held while the database is down therefore also holds up rebalances of the
// group; past the group's rebalance timeout the member is dropped, and its partitions resume elsewhere
// from their committed offsets.
//
// The other way round, a [Publisher] publishes the events of a txinbox outbox (package outbox) to
// Kafka with franz-go's idempotent producer: each event's Key is its record's key and its id is in
// a header, and an event is acknowledged to the relay only once the cluster acknowledged its record.
//
// Each event travels as a CloudEvent in the binary content mode of the Kafka protocol binding: ce_
// headers (ce_id, ce_source, ce_type, ce_time, ce_partitionkey, ce_traceparent, ...) and
// datacontenttype as the content-type header. A Consumer reads them back (adapters.Record.CloudEvent),
// so that a Publisher → Consumer pair needs no key, kind or ordering configuration: the key is ce_id,
// the kind ce_type, the ordering key ce_partitionkey (see adapters.Sink.Store).
package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/adapters"
	"github.com/txinbox/txinbox/adapters/internal/envelope"
	"github.com/txinbox/txinbox/adapters/internal/run"
)

// Config configures a Consumer. Options (with a consumer group and topics), Sink.Store.DB and Sink.Consumer
// are required; every other zero field takes the documented default. New returns an
// *txinbox.ConfigError naming the field that is missing or negative.
type Config struct {
	// Options configure the franz-go client: kgo.SeedBrokers, kgo.ConsumerGroup and kgo.ConsumeTopics
	// are required; TLS, SASL and the like go here too. The consumer adds kgo.DisableAutoCommit and
	// kgo.BlockRebalanceOnPoll.
	Options []kgo.Opt
	// Sink says where records are stored and how they become inbox messages. The kind is the
	// CloudEvents type (ce_type, with ce_specversion), else the Sink.KindHeader header, else
	// Sink.DefaultKind; the ordering key, unless Sink.OrderingKey is set, the CloudEvents
	// partitionkey (ce_partitionkey). Sink.Key default: the CloudEvents id (ce_id), else the
	// x-idempotency-key header, else the record's coordinates "topic:partition:offset"
	// (adapters.FirstOf(adapters.CloudEventID(), adapters.Header(adapters.IdempotencyKeyHeader),
	// adapters.Coordinates())).
	// Coordinates are stable across redeliveries but do not catch a producer that sends the same
	// message twice; adapters.RecordKey() uses the record key, when each message has its own.
	// The consumer logs to Sink.Store's Logger.
	Sink adapters.SinkConfig
	// BatchConfig holds the batch size, waits, retry delays and write timeout, with their
	// defaults; its WriteTimeout also bounds committing a batch's offsets.
	adapters.BatchConfig
}

// Consumer consumes into the inbox as one member of a consumer group. Make it with [New], start it
// with [Consumer.Start] and stop it with [Consumer.Stop].
type Consumer struct {
	cfg  Config
	sink *adapters.Sink
	log  *slog.Logger // the Sink's Store's Logger
	loop run.Loop

	// afterStore, if set (by tests), runs after a batch committed and before its offsets are
	// committed; an error ends the loop at once, as if the process had crashed (Stop returns it).
	afterStore func(batch, size int) error
}

// New checks cfg and returns a Consumer.
func New(cfg Config) (*Consumer, error) {
	if len(cfg.Options) == 0 {
		return nil, &txinbox.ConfigError{Field: "Options", Reason: "required (seed brokers, consumer group, topics)"}
	}
	sink, err := run.Setup(&cfg.BatchConfig, &cfg.Sink,
		adapters.FirstOf(adapters.CloudEventID(), adapters.Header(adapters.IdempotencyKeyHeader), adapters.Coordinates()))
	if err != nil {
		return nil, err
	}
	cfg.Options = append(slices.Clip(cfg.Options), kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll())
	return &Consumer{cfg: cfg, sink: sink, log: cfg.Sink.Store.Logger, loop: run.Loop{Name: "txinbox/kafka"}}, nil
}

// Stats returns what the consumer did so far. Stats.Acked counts records whose offsets were committed.
func (c *Consumer) Stats() adapters.Stats { return c.sink.Stats() }

// Start makes the consumer's own client (an error if its Options are invalid) and returns; in the
// background the client joins the group and the consumer stores and commits batches until
// [Consumer.Stop] is called or ctx ends. Broker disconnections are ridden out by the client. A
// second Start returns an error matching [adapters.ErrAlreadyStarted].
//
// When ctx ends, the consumer stops as with Stop on an ended context: the batch in hand is abandoned.
// To let it finish on SIGTERM, pass a ctx that outlives the signal and call Stop when it comes.
func (c *Consumer) Start(ctx context.Context) error {
	return c.loop.Start(ctx, func(context.Context) (run.Body, error) {
		cl, err := kgo.NewClient(c.cfg.Options...)
		if err != nil {
			return nil, fmt.Errorf("client: %w", err)
		}
		return func(ctx, abort context.Context) error {
			defer cl.CloseAllowingRebalance()
			return c.consume(ctx, abort, cl)
		}, nil
	})
}

// Stop stops fetching, finishes the batch in hand (stores it and commits its offsets), leaves the
// group and returns nil. If ctx ends first, it returns at once an error wrapping ctx.Err(), and the
// batch in hand is abandoned: its offsets are not committed, so the group consumes it again (the
// inbox drops what was stored). A batch that could not be stored is left uncommitted. Stop returns
// the same result on every call, and nil before Start.
func (c *Consumer) Stop(ctx context.Context) error { return c.loop.Stop(ctx) }

// Done returns a channel closed once the consumer stopped: after [Consumer.Stop] or the end of
// Start's context, or when consuming ended on its own (Stop then returns why).
func (c *Consumer) Done() <-chan struct{} { return c.loop.Done() }

// consume polls and handles batches until ctx ends.
func (c *Consumer) consume(ctx, abort context.Context, cl *kgo.Client) error {
	retry := run.Backoff{Base: c.cfg.RetryDelay, Max: c.cfg.MaxRetryDelay}
	for n := 1; ; n++ {
		recs := c.poll(ctx, cl)
		if len(recs) > 0 {
			if err := c.handle(ctx, abort, cl, recs, n, &retry); err != nil {
				return err
			}
		}
		cl.AllowRebalance()
		if run.Stopped(ctx) {
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
			c.log.Warn("txinbox/kafka: fetch", "topic", topic, "partition", partition, "err", err)
		}
	})
	return fs.Records()
}

// handle stores recs, trying again while the database is unreachable, then commits their offsets.
func (c *Consumer) handle(ctx, abort context.Context, cl *kgo.Client, recs []*kgo.Record, n int, retry *run.Backoff) error {
	rs := make([]*adapters.Record, len(recs))
	for i, r := range recs {
		rs[i] = record(r)
	}
	for {
		wctx, cancel := context.WithTimeout(abort, c.cfg.WriteTimeout)
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
				c.log.Warn("txinbox/kafka: offset commit failed; the records will be consumed again and dropped by the inbox as duplicates",
					"records", len(recs), "err", err)
			} else {
				c.sink.CountAcked(len(recs))
			}
			cancel()
			return nil
		}
		cancel()
		d := retry.Next()
		c.log.Error("txinbox/kafka: cannot store batch; retrying it, offsets not committed", "records", len(recs), "err", err, "delay", d)
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

// record turns a Kafka record into a Record: its headers (the last value of a repeated key), its ce_
// headers and content-type as CloudEvent (the Kafka binding of CloudEvents), key, topic, partition
// and offset.
func record(r *kgo.Record) *adapters.Record {
	h := make(map[string]string, len(r.Headers))
	for _, hd := range r.Headers {
		if s, ok := run.Text(hd.Value); ok {
			h[hd.Key] = s
		}
	}
	return &adapters.Record{Source: r.Topic, Partition: r.Partition, Offset: r.Offset, RecordKey: r.Key, Headers: h,
		CloudEvent: envelope.Kafka.Attributes(h), Body: r.Value, Raw: r}
}
