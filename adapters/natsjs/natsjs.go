// Package natsjs consumes a NATS JetStream pull consumer into a txinbox inbox.
//
// Each batch of messages is stored in one transaction (adapters.Sink.Store), and each message is
// acknowledged after that transaction committed. If the database cannot be reached, the batch stays in
// hand, unacknowledged, and is stored again after a delay (its ack deadline extended with InProgress
// meanwhile), so that no later message is stored before it. A crash or a lost connection before the
// acks makes JetStream redeliver the batch after the consumer's AckWait, and the inbox rejects the
// copies already stored as duplicates.
//
// # Order
//
// One Consumer stores the messages in the order JetStream delivers them, one batch after the other,
// so a worker.Pool runs the messages of an ordering key in stream order: through database outages (a
// batch that cannot be stored is held, not handed back) and through Stop (what it hands back, it
// hands back in order, and JetStream delivers it again first). A crash is different: JetStream
// delivers the messages the dead process had in hand again only after AckWait, in the order their
// deadlines end, and meanwhile it has newer messages ready. So Start asks JetStream how many messages
// are pending acknowledgement, and if some are, the Consumer first gathers them: it takes what
// JetStream has ready (after a Stop, all of them, at once), and if some are still in a dead process's
// hands, it waits until AckWait has passed since Start, keeping the newer messages it got meanwhile in
// hand, unstored. Then it stores everything it gathered in stream order, and goes on. A pull request
// ending with an error (a lost connection, a server restart; JetStream sends heartbeats while a
// request waits, so that a lost connection ends it with an error) is handled like a restart: what
// JetStream delivered to it may have been lost on the way, so once the batch in hand is stored and
// acknowledged, the Consumer asks JetStream again and gathers what JetStream still counts as
// delivered to it before storing anything newer. A restart after a crash, or a pull request ending
// with an error, therefore waits up to AckWait (plus a tenth of it, at least a second, for JetStream's
// timer) before it stores anything newer: keep AckWait short. What it gathers is held in memory (at
// most the JetStream consumer's MaxAckPending messages, plus a batch). Processes consuming one
// JetStream consumer side by side have no such guarantee: a process starting, or whose pull request
// ended with an error, while another runs waits for the messages the other one holds, up to the same
// bound, then goes on without them; and when one of them dies, the others get its messages after
// AckWait, behind newer ones of the same keys. Consume a JetStream consumer with one process at a
// time where per-key order matters.
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
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
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
// field takes the documented default. New returns an *txinbox.ConfigError naming the field that is
// missing or negative.
type Config struct {
	// Consumer is the JetStream pull consumer to read, with AckPolicy AckExplicitPolicy (the
	// default). Its AckWait is how long a message delivered to a consumer that died stays invisible
	// before it is redelivered, and so how long a restart after a crash may wait before storing newer
	// messages (see Order in the package documentation); its MaxDeliver must stay unlimited (-1, the
	// default), or a message redelivered after crashes could be dropped by JetStream.
	Consumer jetstream.Consumer
	// Sink says where messages are stored and how they become inbox messages. The kind is the
	// CloudEvents type (ce-type), else the Sink.KindHeader header, else Sink.DefaultKind; the ordering
	// key, unless Sink.OrderingKey is set, the CloudEvents partitionkey. Sink.Key default: the
	// CloudEvents id (ce-id, with ce-specversion), else the Nats-Msg-Id header, else the
	// x-idempotency-key header (adapters.FirstOf(adapters.CloudEventID(), adapters.MessageID(),
	// adapters.Header(adapters.IdempotencyKeyHeader))); a message with none is stored dead.
	// adapters.Coordinates() keys by stream sequence instead. The consumer logs to Sink.Store's
	// Logger.
	Sink adapters.SinkConfig
	// Prefetch is the most messages one pull request asks for: how many may be delivered ahead of
	// the batch being stored. It is raised to BatchSize if lower. Default: 2 × BatchSize.
	Prefetch int
	// BatchConfig holds the batch size, waits, retry delays and write timeout, with their
	// defaults.
	adapters.BatchConfig
}

// Consumer consumes one JetStream consumer into the inbox. Make it with [New], start it with
// [Consumer.Start] and stop it with [Consumer.Stop].
type Consumer struct {
	cfg  Config
	sink *adapters.Sink
	log  *slog.Logger // the Sink's Store's Logger
	loop run.Loop
	n    int // batches handled, numbered from 1 for the hooks below (the loop's goroutine only)
	// held is a batch that could not be stored when consuming was asked to end: it is given back
	// first (the loop's goroutine only).
	held []jetstream.Msg

	// afterStore, if set (by tests), runs after a batch committed and before it is acknowledged; an
	// error ends the loop at once, as if the process had crashed (Stop returns it).
	afterStore func(batch, size int) error
	// beforeStore, if set (by tests), runs before a batch's first store; an error ends the loop at
	// once, the batch neither stored nor handed back, as if the process had crashed (Stop returns it).
	beforeStore func(batch, size int) error
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
	return &Consumer{cfg: cfg, sink: sink, log: cfg.Sink.Store.Logger, loop: run.Loop{Name: "txinbox/natsjs"}}, nil
}

// Stats returns what the consumer did so far.
func (c *Consumer) Stats() adapters.Stats { return c.sink.Stats() }

// Start reads the JetStream consumer's state (an error if it cannot: the connection is closed, the
// consumer deleted) and returns; in the background the consumer stores and acknowledges batches
// until [Consumer.Stop] is called or ctx ends. If the JetStream consumer had messages pending
// acknowledgement, they are gathered and stored first, in stream order, with any newer message got
// meanwhile (see Order in the package documentation: this may wait up to about AckWait); otherwise
// pulling starts before Start returns. Disconnections are ridden out by the NATS client, and after
// one the messages JetStream still counts as delivered are gathered first, as at Start; if consuming
// becomes impossible the consumer stops on its own: [Consumer.Done] is closed and Stop returns why. A
// second Start returns an error matching [adapters.ErrAlreadyStarted].
//
// When ctx ends, the consumer stops as with Stop on an ended context: the batch in hand is abandoned.
// To let it finish on SIGTERM, pass a ctx that outlives the signal and call Stop when it comes.
func (c *Consumer) Start(ctx context.Context) error {
	return c.loop.Start(ctx, func(ctx context.Context) (run.Body, error) {
		started := time.Now()
		info, err := c.cfg.Consumer.Info(ctx)
		if err != nil {
			return nil, fmt.Errorf("consumer info: %w", err)
		}
		p := &puller{cons: c.cfg.Consumer, size: c.cfg.Prefetch, log: c.log}
		if info.NumAckPending == 0 {
			if err := p.pull(); err != nil {
				return nil, err
			}
		}
		return func(ctx, abort context.Context) error {
			retry := run.Backoff{Base: c.cfg.RetryDelay, Max: c.cfg.MaxRetryDelay}
			if info.NumAckPending > 0 {
				if err := c.takeBack(ctx, abort, info, started, &retry); err != nil || run.Stopped(ctx) {
					return err
				}
			}
			defer c.release(p)
			return c.consume(ctx, abort, p, &retry)
		}, nil
	})
}

// pullExpiry is how long a pull request waits for messages: it bounds how long Stop waits for the
// open request to end before it gives back what was prefetched.
const pullExpiry = time.Second

// errInterrupted is what puller.next returns when a pull request ended with an error that does not
// end consuming (a lost connection, a server restart): messages JetStream delivered to the request
// may have been lost on the way.
var errInterrupted = errors.New("pull request interrupted")

// puller pulls messages with one pull request at a time, each for up to size messages and open for
// up to pullExpiry. A request ends on the server before the next is sent and before Stop gives
// messages back: a request left open would take the messages given back (NAKed) after the consumer
// stopped listening, and JetStream would deliver them again only after AckWait, behind newer ones.
// JetStream sends a heartbeat halfway through a request that waits for messages, so that a request
// whose connection was lost ends with an error (jetstream.ErrNoHeartbeat) rather than as if it had
// expired: what JetStream delivered to it may have been lost on the way.
type puller struct {
	cons jetstream.Consumer
	size int
	log  *slog.Logger
	open jetstream.MessageBatch // the request being read, nil if none
}

// pull sends a pull request.
func (p *puller) pull() error {
	b, err := p.cons.Fetch(p.size, jetstream.FetchMaxWait(pullExpiry), jetstream.FetchHeartbeat(pullExpiry/2))
	if err != nil {
		return fmt.Errorf("pull: %w", err)
	}
	p.open = b
	return nil
}

// next returns the next message, sending pull requests as needed. It returns nil and no error when
// ctx ended first, errInterrupted when a request ended with any other error than the ones below (no
// request is open then), and an error when no request can be sent or JetStream says the consumer is
// gone.
func (p *puller) next(ctx context.Context) (jetstream.Msg, error) {
	for {
		if p.open == nil {
			if err := p.pull(); err != nil {
				return nil, err
			}
		}
		select {
		case m, ok := <-p.open.Messages():
			if ok {
				return m, nil
			}
			err := p.open.Error()
			p.open = nil
			switch {
			case err == nil:
			case errors.Is(err, jetstream.ErrConsumerDeleted), errors.Is(err, jetstream.ErrBadRequest):
				return nil, fmt.Errorf("pull: %w", err)
			default:
				p.log.Warn("txinbox/natsjs: pull", "err", err)
				return nil, errInterrupted
			}
		case <-ctx.Done():
			return nil, nil
		}
	}
}

// stop waits until the open request ended and returns the messages it delivered that next did not
// return.
func (p *puller) stop() []jetstream.Msg {
	if p.open == nil {
		return nil
	}
	var msgs []jetstream.Msg
	for m := range p.open.Messages() {
		msgs = append(msgs, m)
	}
	p.open = nil
	return msgs
}

// Stop stops pulling, finishes the batch in hand (stores and acknowledges it), negatively
// acknowledges the messages it had prefetched so that JetStream delivers them again at once, and
// returns nil. A batch held because it could not be stored is negatively acknowledged too, before the
// prefetched messages, and delivered again at once. The negative acknowledgements go out once the
// open pull request ended (pull requests wait for messages up to a second), so that none of them is
// delivered to it again. If ctx ends first, it returns at once an error wrapping ctx.Err(), and the
// batch in hand is abandoned: JetStream delivers it again after AckWait (the inbox drops what was
// stored). If consuming had ended on its own, Stop returns why. Stop returns the same result on every
// call, and nil before Start.
func (c *Consumer) Stop(ctx context.Context) error { return c.loop.Stop(ctx) }

// Done returns a channel closed once the consumer stopped: after [Consumer.Stop] or the end of
// Start's context, or when consuming ended on its own (Stop then returns why).
func (c *Consumer) Done() <-chan struct{} { return c.loop.Done() }

// consume collects and handles batches until ctx ends or pulling becomes impossible. After a pull
// request was interrupted, it handles the batch collected so far, then gathers what JetStream still
// counts as delivered (resync) before it pulls again.
func (c *Consumer) consume(ctx, abort context.Context, p *puller, retry *run.Backoff) error {
	for {
		batch, err := c.collect(ctx, p)
		interrupted := errors.Is(err, errInterrupted)
		if len(batch) > 0 {
			if herr := c.handle(ctx, abort, batch, retry, interrupted); herr != nil {
				return herr
			}
		}
		if err != nil && !interrupted {
			return fmt.Errorf("txinbox/natsjs: consume: %w", err)
		}
		if run.Stopped(ctx) {
			return nil
		}
		if interrupted {
			if err := c.resync(ctx, abort, retry); err != nil || run.Stopped(ctx) {
				return err
			}
		}
	}
}

// resync runs after a pull request was interrupted (a lost connection, a server restart): JetStream
// may count messages it delivered to the request as pending acknowledgement though they never
// arrived, and deliver them again only after AckWait, while it has newer ones of the same keys ready
// at once. After a pause (a request that fails at once must not make the consumer spin), it reads the
// JetStream consumer's info, again after the retry delay while it cannot (the server may be
// restarting), and if messages are pending acknowledgement it gathers them as Start does (takeBack),
// before anything newer is stored. It returns nil when ctx ends, and an error when the connection is
// closed for good.
func (c *Consumer) resync(ctx, abort context.Context, retry *run.Backoff) error {
	if !run.Sleep(ctx, pullExpiry) {
		return nil
	}
	for {
		started := time.Now()
		info, err := c.cfg.Consumer.Info(ctx)
		if err == nil {
			if info.NumAckPending == 0 {
				return nil
			}
			c.log.Warn("txinbox/natsjs: pull request interrupted; gathering the messages pending acknowledgement before newer ones",
				"pending", info.NumAckPending)
			return c.takeBack(ctx, abort, info, started, retry)
		}
		if run.Stopped(ctx) {
			return nil
		}
		if errors.Is(err, nats.ErrConnectionClosed) {
			return fmt.Errorf("txinbox/natsjs: consumer info: %w", err)
		}
		d := retry.Next()
		c.log.Warn("txinbox/natsjs: cannot read the consumer's info after an interrupted pull request; reading it again", "err", err, "delay", d)
		if !run.Sleep(ctx, d) {
			return nil
		}
	}
}

// collect waits for a first message, then gathers more until BatchSize, BatchWait or the end of ctx.
// It returns no messages and no error when ctx ended first, and an error when pulling became
// impossible.
func (c *Consumer) collect(ctx context.Context, p *puller) ([]jetstream.Msg, error) {
	m, err := p.next(ctx)
	if m == nil {
		return nil, err
	}
	batch := []jetstream.Msg{m}
	bctx, cancel := context.WithTimeout(ctx, c.cfg.BatchWait)
	defer cancel()
	for len(batch) < c.cfg.BatchSize {
		m, err := p.next(bctx)
		if m == nil {
			return batch, err
		}
		batch = append(batch, m)
	}
	return batch, nil
}

// handle stores batch and acknowledges each message; with confirm, the last acknowledgement waits for
// JetStream's answer, so that JetStream has processed all of them (they are processed in order) when
// the consumer's info is read next. While the batch cannot be stored it holds it:
// it waits the retry delay, extending the messages' ack deadline (InProgress) meanwhile, and stores it
// again, so that no later message is stored before it. If ctx ends first, it returns nil with the
// batch in c.held, for the caller to give back (handBack) once nothing is pulled any more:
// JetStream then delivers it again at once, before the prefetched messages given back after it.
func (c *Consumer) handle(ctx, abort context.Context, batch []jetstream.Msg, retry *run.Backoff, confirm bool) error {
	c.n++
	if c.beforeStore != nil {
		if err := c.beforeStore(c.n, len(batch)); err != nil {
			return err
		}
	}
	for {
		recs := make([]*adapters.Record, len(batch))
		for i, m := range batch {
			recs[i] = record(m)
		}
		wctx, cancel := context.WithTimeout(abort, c.cfg.WriteTimeout)
		_, err := c.sink.Store(wctx, recs)
		cancel()
		if err == nil {
			break
		}
		d := retry.Next()
		c.log.Error("txinbox/natsjs: cannot store batch; holding it and storing it again", "messages", len(batch), "err", err, "delay", d)
		if !run.Hold(ctx, d, func() { inProgress(batch) }, c.ackWait()/4) {
			c.held = batch // given back by the caller, first
			return nil
		}
	}
	retry.Reset()
	if c.afterStore != nil {
		if err := c.afterStore(c.n, len(batch)); err != nil {
			return err
		}
	}
	acked := 0
	for i, m := range batch {
		ack := m.Ack
		if confirm && i == len(batch)-1 {
			ack = func() error { return m.DoubleAck(abort) }
		}
		if err := ack(); err != nil {
			c.log.Warn("txinbox/natsjs: ack failed; JetStream redelivers after AckWait, and the inbox drops the copy",
				"messages", len(batch)-acked, "err", err)
			break
		}
		acked++
	}
	c.sink.CountAcked(acked)
	return nil
}

// inProgress resets the ack deadline of msgs (a failure is left to the redelivery it lets happen: the
// inbox drops the copy).
func inProgress(msgs []jetstream.Msg) {
	for _, m := range msgs {
		if m.InProgress() != nil {
			return
		}
	}
}

// ackWait returns the JetStream consumer's AckWait (JetStream's default, 30s, if it reports none).
func (c *Consumer) ackWait() time.Duration {
	if info := c.cfg.Consumer.CachedInfo(); info != nil && info.Config.AckWait > 0 {
		return info.Config.AckWait
	}
	return 30 * time.Second
}

// takeBack runs, with no pull request open, when the JetStream consumer had messages pending
// acknowledgement at Start or after an interrupted pull request (info, read at started): messages
// delivered before, to a process that stopped and handed them back (JetStream has them ready again)
// or that died with them in hand, or lost on the way to this one (JetStream delivers them again once
// their AckWait has passed, in the order their deadlines end, which need not be the stream's). It
// gathers those messages and stores them, with any newer one it got meanwhile, in stream order,
// before anything else. It fetches what JetStream has ready, and counts the messages delivered before
// (stream sequence up to info.Delivered.Stream) as they come; a newer message means the missing ones
// are not ready. While some are missing it waits until AckWait has passed since started (they have
// all expired by then), then fetches again, one message at a time, until they are all back or a
// tenth of AckWait more (at least a second: JetStream's timer may run late) has passed; the rest are
// then held by another live process, or were acknowledged. Meanwhile it keeps what it gathered from
// being delivered again (InProgress). If ctx ends first, it hands what it gathered back (NAK), in
// stream order.
func (c *Consumer) takeBack(ctx, abort context.Context, info *jetstream.ConsumerInfo, started time.Time, retry *run.Backoff) error {
	missing := info.NumAckPending
	last := info.Delivered.Stream // every message after it is newer than every pending one
	ackWait := c.ackWait()
	expired := started.Add(ackWait)
	giveUp := expired.Add(max(ackWait/10, time.Second))
	seen := map[uint64]bool{}
	var back []jetstream.Msg
	keep := func() { inProgress(back) }
	giveBack := func() {
		slices.SortFunc(back, func(a, b jetstream.Msg) int { return cmp.Compare(streamSeq(a), streamSeq(b)) })
		c.handBack(back)
	}
	newer := false
	size := min(missing, c.cfg.BatchSize)
	for missing > 0 {
		if newer && time.Now().Before(expired) {
			// The missing ones are held by a process that died: wait until they expired.
			if !run.Hold(ctx, time.Until(expired), keep, ackWait/4) {
				giveBack()
				return nil
			}
			continue
		}
		now := time.Now()
		msgs, err := c.fetchReady(ctx, size)
		if err != nil {
			return err
		}
		old := false
		for _, m := range msgs {
			seq := streamSeq(m)
			if seen[seq] {
				continue // a second copy: the first one's acknowledgement covers it
			}
			seen[seq] = true
			back = append(back, m)
			if seq > last {
				newer = true
			} else {
				missing--
				old = true
			}
		}
		if old {
			size = min(max(missing, 1), c.cfg.BatchSize)
			continue
		}
		if now.After(giveUp) {
			c.log.Warn("txinbox/natsjs: messages pending acknowledgement did not come back; going on without them",
				"missing", missing, "waited", time.Since(started).Round(time.Millisecond))
			break
		}
		if now.After(expired) {
			size = 1 // each poll takes at most one more newer message
		}
		// Nothing delivered before is ready: they come back once expired.
		if !run.Hold(ctx, max(time.Until(expired), 100*time.Millisecond), keep, ackWait/4) {
			giveBack()
			return nil
		}
	}
	slices.SortFunc(back, func(a, b jetstream.Msg) int { return cmp.Compare(streamSeq(a), streamSeq(b)) })
	for len(back) > 0 {
		k := min(len(back), c.cfg.BatchSize)
		if err := c.handle(ctx, abort, back[:k], retry, false); err != nil || run.Stopped(ctx) {
			c.handBack(c.held)
			c.held = nil
			if err == nil {
				c.handBack(back[k:])
			}
			return err
		}
		back = back[k:]
	}
	return nil
}

// fetchReady returns up to n messages that JetStream can deliver at once (none if it has none). An
// error means the request could not be sent (the connection is closed); a failed answer is logged and
// counts as none.
func (c *Consumer) fetchReady(ctx context.Context, n int) ([]jetstream.Msg, error) {
	b, err := c.cfg.Consumer.FetchNoWait(n)
	if err != nil {
		return nil, fmt.Errorf("txinbox/natsjs: fetch: %w", err)
	}
	var msgs []jetstream.Msg
	for m := range b.Messages() {
		msgs = append(msgs, m)
	}
	if err := b.Error(); err != nil && ctx.Err() == nil {
		c.log.Warn("txinbox/natsjs: fetch", "err", err)
	}
	return msgs, nil
}

// streamSeq returns m's stream sequence (0 if its metadata cannot be read).
func streamSeq(m jetstream.Msg) uint64 {
	md, err := m.Metadata()
	if err != nil {
		return 0
	}
	return md.Sequence.Stream
}

// release waits until the open pull request ended, then negatively acknowledges, so that JetStream
// delivers them again at once and in this order, the batch handle held and gave back (c.held), then
// what was prefetched but not handled.
func (c *Consumer) release(p *puller) {
	prefetched := p.stop()
	c.handBack(c.held)
	c.held = nil
	c.handBack(prefetched)
}

// handBack negatively acknowledges msgs in order, so that JetStream delivers them again at once.
func (c *Consumer) handBack(msgs []jetstream.Msg) {
	for _, m := range msgs {
		if err := m.Nak(); err != nil {
			c.log.Warn("txinbox/natsjs: nak failed; JetStream redelivers after AckWait", "err", err)
			return
		}
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
