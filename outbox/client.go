package outbox

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/internal/schemasql"
	"github.com/txinbox/txinbox/internal/sqlc"
	"github.com/txinbox/txinbox/internal/typednil"
)

// Config configures a Client. The zero value is valid.
type Config struct {
	// MaxPayloadBytes rejects larger payloads with a *[txinbox.ValidationError]. Default: 1 MiB
	// (1 << 20). Negative is a *[txinbox.ConfigError].
	MaxPayloadBytes int
	// TopicChecker, if set, is asked about each message's topic by Publish, which refuses a topic it
	// refuses with a *[txinbox.ValidationError] (Field "topic", its reason in Reason) before
	// anything is written. Give it the relay's Publisher when that is a [TopicChecker] (the adapters'
	// webhook, Kafka and NATS JetStream publishers are), so that an event the relay could never
	// deliver is refused in the caller's transaction instead of becoming a dead letter later.
	// Default: none (the relay still checks, if its Publisher is a TopicChecker).
	TopicChecker TopicChecker
}

// Client writes events into the outbox of a schema. It is safe for concurrent use.
type Client struct {
	store  txinbox.Store
	cfg    Config
	st     *schemasql.Schema
	notify notifier
}

// New returns a Client of st (which says the schema, and Store.NotifyInterval, the least time
// between two of the Client's wake-up notifications). It checks st and cfg (a
// *[txinbox.ConfigError] says which field is wrong) and does not touch the database.
func New(st txinbox.Store, cfg Config) (*Client, error) {
	st, err := st.Resolve()
	if err != nil {
		return nil, err
	}
	if name, reason := typednil.Field(cfg); name != "" {
		return nil, &txinbox.ConfigError{Field: name, Reason: reason}
	}
	if cfg.MaxPayloadBytes == 0 {
		cfg.MaxPayloadBytes = defaultMaxPayloadBytes
	}
	if cfg.MaxPayloadBytes < 0 {
		return nil, &txinbox.ConfigError{Field: "MaxPayloadBytes", Reason: "must not be negative"}
	}
	return &Client{store: st, cfg: cfg, st: schemasql.New(st.Schema),
		notify: notifier{interval: st.NotifyInterval, channel: schemasql.OutboxChannel(st.Schema)}}, nil
}

// Publish writes msgs into the outbox inside tx, the caller's transaction, and returns their event
// ids in order. The events exist only if tx commits: then a [Relay] publishes each of them at least
// once; if tx rolls back, none of them is ever published. An event's id is a UUID (version 7,
// 36 characters) drawn by this call: unique across schemas, databases and restores of either, never
// reused. Publishers send it as the event's idempotency key downstream (txinbox's inbox takes it as
// inbox.Message.Key), so that a consumer applies the event once however often it arrives.
//
// The events of one call are written by one statement, in the order of msgs. Publish does not
// commit, roll back or otherwise end tx, and neither waits for a relay.
//
// Bad input returns an error before any statement is sent, so tx is left as it was: a nil tx or
// more than 1000 messages, or messages whose payloads and headers exceed 64 MiB together, a
// *[txinbox.ArgumentError]; an invalid message, or one whose topic Config.TopicChecker refuses, a
// *[txinbox.ValidationError] naming the first one (errors.Is [txinbox.ErrInvalidMessage]). No message is an empty call: no statement, no
// ids. An error of the statement itself (the schema not migrated: errors.Is txinbox.ErrNotMigrated;
// a lost connection) leaves tx aborted, as any failed statement does.
//
// Wake-up: the statement also sends a notification that wakes idle relays when tx commits, at most
// once per Store.NotifyInterval per Client; the relays' fast polling after activity
// (RelayConfig.PollInterval) finds the events whose notification was debounced.
func (c *Client) Publish(ctx context.Context, tx pgx.Tx, msgs ...Message) ([]string, error) {
	if tx == nil {
		return nil, &txinbox.ArgumentError{Name: "tx", Reason: "is nil: Publish writes in the caller's transaction"}
	}
	if len(msgs) == 0 {
		return nil, nil
	}
	if len(msgs) > maxMessages {
		return nil, &txinbox.ArgumentError{Name: "msgs", Reason: fmt.Sprintf("%d messages, more than the limit of %d per call", len(msgs), maxMessages)}
	}
	if total := callBytes(msgs); total > maxCallBytes {
		return nil, &txinbox.ArgumentError{Name: "msgs", Reason: fmt.Sprintf("payloads and headers of %d bytes together, more than the limit of %d", total, maxCallBytes)}
	}
	for i := range msgs {
		if err := validate(i, &msgs[i], c.cfg.MaxPayloadBytes); err != nil {
			return nil, err
		}
		if c.cfg.TopicChecker != nil {
			if err := c.cfg.TopicChecker.CheckTopic(msgs[i].Topic); err != nil {
				return nil, &txinbox.ValidationError{Index: i, Field: "topic", Reason: "refused by Config.TopicChecker: " + err.Error()}
			}
		}
	}
	if t := c.store.Tracer; t != nil {
		data := txinbox.TraceStart{Op: txinbox.OpPublish, Schema: c.store.Schema, Messages: make([]txinbox.TraceMessage, len(msgs))}
		for i := range msgs {
			data.Messages[i] = txinbox.TraceMessage{Kind: msgs[i].kind(), Topic: msgs[i].Topic, Headers: msgs[i].Headers}
		}
		ctx = t.TraceStart(ctx, data)
		ids, err := c.publish(ctx, tx, msgs)
		t.TraceEnd(ctx, txinbox.TraceEnd{Op: txinbox.OpPublish, EventIDs: ids, Err: err})
		return ids, err
	}
	return c.publish(ctx, tx, msgs)
}

// publish writes validated msgs, with the trace context of ctx when the Store's Tracer is a
// txinbox.Injector.
func (c *Client) publish(ctx context.Context, tx pgx.Tx, msgs []Message) ([]string, error) {
	n := len(msgs)
	p := sqlc.OutboxPublishParams{
		EventIds: make([]string, n), Topics: make([]string, n), Keys: make([]string, n), Kinds: make([]string, n),
		ContentTypes: make([]string, n), Payloads: make([]string, n), Headers: make([]string, n),
		NotBefores: make([]pgtype.Timestamptz, n), NotifyChannel: c.notify.channel,
	}
	var trace map[string]string // the trace context of ctx, if the Store's Tracer injects one
	if in, ok := c.store.Tracer.(txinbox.Injector); ok {
		trace = map[string]string{}
		in.Inject(ctx, trace)
	}
	now := time.Now()
	for i := range msgs {
		m := &msgs[i]
		p.EventIds[i], p.Topics[i], p.Keys[i], p.Payloads[i] = newEventID(now), m.Topic, m.Key, string(m.Payload)
		p.Kinds[i], p.ContentTypes[i] = m.Kind, m.ContentType
		p.Headers[i] = headersJSON(withTrace(m.Headers, trace))
		if !m.NotBefore.IsZero() {
			p.NotBefores[i] = pgtype.Timestamptz{Time: m.NotBefore, Valid: true}
		}
	}
	g, granted := c.notify.grant()
	p.Notify = granted
	written, err := schemasql.Queries.OutboxPublish(ctx, c.st.Wrap(tx), p)
	if err != nil {
		if granted {
			c.notify.giveBack(g)
		}
		return nil, schemasql.Err(err)
	}
	if written != int64(n) {
		return nil, fmt.Errorf("txinbox: publishing %d events wrote %d", n, written)
	}
	return p.EventIds, nil
}

// withTrace returns headers with the trace context trace added, unless headers hold a traceparent
// already (the caller's own wins), trace is empty, or it would take headers past maxHeaders or
// maxHeadersBytes (the event is then written untraced rather than refused); headers is not
// modified.
func withTrace(headers, trace map[string]string) map[string]string {
	if len(trace) == 0 || headers[txinbox.HeaderTraceParent] != "" || len(headers)+len(trace) > maxHeaders {
		return headers
	}
	size := 0
	for _, h := range []map[string]string{headers, trace} {
		for k, v := range h {
			size += len(k) + len(v)
		}
	}
	if size > maxHeadersBytes {
		return headers
	}
	out := make(map[string]string, len(headers)+len(trace))
	maps.Copy(out, headers)
	maps.Copy(out, trace)
	return out
}

// callBytes returns the bytes of the payloads and headers of msgs.
func callBytes(msgs []Message) int {
	total := 0
	for i := range msgs {
		total += len(msgs[i].Payload)
		for k, v := range msgs[i].Headers {
			total += len(k) + len(v)
		}
	}
	return total
}

// headersJSON encodes validated headers as a JSON object ({} when there are none).
func headersJSON(h map[string]string) string {
	if len(h) == 0 {
		return "{}"
	}
	b, _ := json.Marshal(h) // a map of strings always encodes
	return string(b)
}

// notifier debounces a Client's notifications: at most one per interval.
//
// PostgreSQL serialises the commits of notifying transactions (a global lock held from the start of
// each one's commit until its commit record is flushed), so a NOTIFY in every publishing transaction
// would cap the commit rate of the whole cluster (package inbox measured it). A relay keeps polling
// fast for a while after any activity, notifications included (RelayConfig.PollInterval), which covers
// the events published in between. One case is not covered: an event published in a transaction
// that commits after a notification was granted to another transaction that commits much later waits
// until that commit or the relays' next poll, whichever comes first.
type notifier struct {
	interval time.Duration // Store.NotifyInterval: negative, never notify
	channel  string
	last     atomic.Int64 // monotonic ns (since epoch) of the last notification granted; 0: never
}

// epoch anchors the notifiers' monotonic clock.
var epoch = time.Now()

type notifyGrant struct{ prev, now int64 }

// grant takes the turn to notify if the interval has passed since the last one.
func (n *notifier) grant() (notifyGrant, bool) {
	if n.interval < 0 {
		return notifyGrant{}, false
	}
	now := int64(time.Since(epoch)) + int64(n.interval) + 1 // > 0, so 0 means never
	prev := n.last.Load()
	if now-prev < int64(n.interval) || !n.last.CompareAndSwap(prev, now) {
		return notifyGrant{}, false
	}
	return notifyGrant{prev: prev, now: now}, true
}

// giveBack returns the turn of a statement that failed (its notification was never sent).
func (n *notifier) giveBack(g notifyGrant) { n.last.CompareAndSwap(g.now, g.prev) }
