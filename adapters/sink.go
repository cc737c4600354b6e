package adapters

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/adapters/internal/envelope"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/internal/limits"
)

// DefaultKindHeader is SinkConfig.KindHeader when it is empty.
const DefaultKindHeader = "x-kind"

// SinkConfig configures a Sink: where messages are stored and how records become inbox messages.
type SinkConfig struct {
	// Store is where the messages go: the database (usually a *pgxpool.Pool, required) and the
	// schema, the same [txinbox.Store] the service's inbox.Client and worker.Pool take. Its Tracer
	// (txinbox.Store.Tracer) is told about each batch's receive and the seen-key cache: a
	// *metrics.Metrics counts the records received and the cache's hits, misses and fallbacks.
	Store txinbox.Store
	// MaxPayloadBytes is the largest body accepted. Default: 1 MiB (inbox.Config.MaxPayloadBytes's).
	// A larger body is stored dead, its raw bytes truncated to this size.
	MaxPayloadBytes int
	// Consumer is the inbox consumer the messages are for (inbox.Message.Consumer). Required.
	Consumer string
	// Key derives the idempotency key. Default: chosen by the broker package (see its Config), which
	// starts with CloudEventID(), the id attribute of a CloudEvent (the event id of a txinbox outbox's
	// publishers).
	Key KeyFunc
	// KindHeader is the header holding the message kind when the record is no CloudEvent with a type
	// attribute and has no type property (only AMQP has one). Default: DefaultKindHeader ("x-kind").
	KindHeader string
	// DefaultKind is the kind of a record that names none. Default: "": such a record is stored dead.
	DefaultKind string
	// OrderingKey, if set, derives the ordering key (inbox.Message.OrderingKey); Coordinates-like
	// strategies make no sense here, RecordKey (Kafka) or a Header do. If it returns an error, the
	// message has no ordering key. Default: nil: the partitionkey attribute of a CloudEvent (the event
	// key of a txinbox outbox's publishers), else no ordering key.
	OrderingKey KeyFunc
}

// Sink writes batches of records into the inbox. It is safe for concurrent use.
type Sink struct {
	cfg    SinkConfig
	client *inbox.Client
	stats  counters
}

type counters struct {
	batches, records, inserted, duplicates, conflicts, undecodable, failures, acked atomic.Int64
}

// Stats counts what a Sink (and the adapter using it) did since it was made.
type Stats struct {
	Batches     int64 // batches committed
	Records     int64 // records in committed batches
	Inserted    int64 // new messages stored
	Duplicates  int64 // records whose key was already stored with the same kind and payload
	Conflicts   int64 // records whose key was already stored with another kind or payload (logged, dropped)
	Undecodable int64 // records stored dead because they could not be decoded
	Failures    int64 // batches that could not be stored (database errors): not acknowledged
	Acked       int64 // records acknowledged to the broker (reported by the adapter)
}

// NewSink checks cfg and returns a Sink. Key is required here (broker packages set their default).
func NewSink(cfg SinkConfig) (*Sink, error) {
	store, err := cfg.Store.Resolve()
	if err != nil {
		return nil, err
	}
	cfg.Store = store
	if err := txinbox.ValidateName(cfg.Consumer); err != nil {
		return nil, &txinbox.ConfigError{Field: "Consumer", Reason: err.Error()}
	}
	if cfg.Key == nil {
		return nil, &txinbox.ConfigError{Field: "Key", Reason: "required"}
	}
	if cfg.DefaultKind != "" {
		if err := txinbox.ValidateName(cfg.DefaultKind); err != nil {
			return nil, &txinbox.ConfigError{Field: "DefaultKind", Reason: err.Error()}
		}
	}
	if cfg.KindHeader == "" {
		cfg.KindHeader = DefaultKindHeader
	}
	if cfg.MaxPayloadBytes == 0 {
		cfg.MaxPayloadBytes = 1 << 20
	}
	client, err := inbox.New(cfg.Store, inbox.Config{MaxPayloadBytes: cfg.MaxPayloadBytes})
	if err != nil {
		return nil, err
	}
	return &Sink{cfg: cfg, client: client}, nil
}

// Config returns the configuration with defaults applied.
func (s *Sink) Config() SinkConfig { return s.cfg }

// Stats returns the counters so far.
func (s *Sink) Stats() Stats {
	c := &s.stats
	return Stats{
		Batches: c.batches.Load(), Records: c.records.Load(), Inserted: c.inserted.Load(),
		Duplicates: c.duplicates.Load(), Conflicts: c.conflicts.Load(), Undecodable: c.undecodable.Load(),
		Failures: c.failures.Load(), Acked: c.acked.Load(),
	}
}

// CountAcked adds n to Stats.Acked; adapters call it after acknowledging n records.
func (s *Sink) CountAcked(n int) { s.stats.acked.Add(int64(n)) }

// BatchResult says what Store did with one batch.
type BatchResult struct {
	Inserted, Duplicates, Conflicts, Undecodable int
}

type item struct {
	rec      *Record
	msg      inbox.Message
	bad      *inbox.Undecodable
	conflict int64          // the stored message whose key this one reused with another payload
	receipt  *inbox.Receipt // msg's receipt, once stored
}

// Store writes recs into the inbox in one transaction and returns after it committed; the caller may
// then acknowledge every record of the batch.
//
// Each record becomes an inbox message: its key is SinkConfig.Key's; its kind is, the first that is
// not empty, the type attribute of a CloudEvent ([Record.IsCloudEvent]), the record's Type (AMQP),
// the SinkConfig.KindHeader header, SinkConfig.DefaultKind; its ordering key is SinkConfig.OrderingKey's,
// or without one the partitionkey attribute of a CloudEvent; its headers are the record's. A
// CloudEvent's headers are stored without the broker's prefixed copies of its attributes (ce-id,
// ce_id, cloudEvents_id, ...): each attribute is stored under "ce-" and its name instead (ce-id,
// ce-source, ce-type, ce-time, ce-specversion, ce-datacontenttype, ce-partitionkey, decoded, the
// same for every broker), but for the trace context, stored as the W3C headers "traceparent" and
// "tracestate" (the broker's protocol headers, in any case, else the attributes), which a worker's
// Tracer continues.
// New messages are inserted (inbox.Client.ReceiveManyTx,
// one statement for the batch); a duplicate is left alone; a key conflict (same key, other kind or
// payload) is logged and dropped, the stored message unchanged. A record that cannot be decoded (its
// body is not JSON, it has no valid key or kind) is stored dead with its raw bytes
// (inbox.Client.ReceiveUndecodableTx), keyed by its key if it has a valid one and by the hash of its
// bytes otherwise, in the same transaction, and logged.
//
// An error means nothing was stored (the transaction rolled back, or its outcome is unknown): the
// caller must not acknowledge the batch, and redelivery is safe.
func (s *Sink) Store(ctx context.Context, recs []*Record) (BatchResult, error) {
	if len(recs) == 0 {
		return BatchResult{}, nil
	}
	items := make([]item, len(recs))
	for i, r := range recs {
		items[i] = s.decode(r)
	}
	res, err := s.store(ctx, items)
	if err != nil {
		s.stats.failures.Add(1)
		return BatchResult{}, err
	}
	c := &s.stats
	c.batches.Add(1)
	c.records.Add(int64(len(recs)))
	c.inserted.Add(int64(res.Inserted))
	c.duplicates.Add(int64(res.Duplicates))
	c.conflicts.Add(int64(res.Conflicts))
	c.undecodable.Add(int64(res.Undecodable))
	return res, nil
}

func (s *Sink) store(ctx context.Context, items []item) (BatchResult, error) {
	tx, err := s.cfg.Store.DB.Begin(ctx)
	if err != nil {
		return BatchResult{}, fmt.Errorf("txinbox/adapters: begin: %w", err)
	}
	defer func() {
		// Bounded even after ctx ended: a rollback on a connection that broke returns at once.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = tx.Rollback(rctx)
	}()
	res, err := s.write(ctx, tx, items, false)
	if errors.Is(err, txinbox.ErrInvalidMessage) {
		// PostgreSQL rejected a message that passed validation (a JSON escape jsonb cannot hold, say):
		// find it by storing each message in a savepoint of its own.
		_ = tx.Rollback(ctx)
		if tx, err = s.cfg.Store.DB.Begin(ctx); err != nil {
			return BatchResult{}, fmt.Errorf("txinbox/adapters: begin: %w", err)
		}
		res, err = s.write(ctx, tx, items, true)
	}
	if err != nil {
		return BatchResult{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return BatchResult{}, fmt.Errorf("txinbox/adapters: commit: %w", err)
	}
	s.remember(ctx, items)
	s.logOutcomes(items)
	return res, nil
}

// remember caches the keys of a committed batch in the Store's seen-key cache, if there is one.
func (s *Sink) remember(ctx context.Context, items []item) {
	if s.cfg.Store.SeenCache == nil {
		return
	}
	var msgs []inbox.Message
	var rcs []inbox.Receipt
	for i := range items {
		if it := &items[i]; it.bad == nil && it.receipt != nil {
			msgs = append(msgs, it.msg)
			rcs = append(rcs, *it.receipt)
		}
	}
	s.client.Remember(ctx, msgs, rcs)
}

// write stores items in tx: the decoded messages in one statement (or, if alone, each in a savepoint
// of its own, the ones PostgreSQL rejects turning undecodable), then the undecodable ones.
func (s *Sink) write(ctx context.Context, tx pgx.Tx, items []item, alone bool) (BatchResult, error) {
	var res BatchResult
	var good []int
	for i := range items {
		if items[i].bad == nil {
			good = append(good, i)
		}
	}
	count := func(rc inbox.Receipt, it *item) {
		it.receipt = &rc
		switch rc.Outcome {
		case inbox.Inserted:
			res.Inserted++
		case inbox.Duplicate:
			res.Duplicates++
		case inbox.Conflict:
			res.Conflicts++
			it.conflict = rc.ID
		}
	}
	if !alone && len(good) > 0 {
		msgs := make([]inbox.Message, len(good))
		for j, i := range good {
			msgs[j] = items[i].msg
		}
		rcs, err := s.client.ReceiveManyTx(ctx, tx, msgs)
		if err != nil {
			return res, err
		}
		for j, i := range good {
			count(rcs[j], &items[i])
		}
	}
	if alone {
		for _, i := range good {
			it := &items[i]
			sp, err := tx.Begin(ctx)
			if err != nil {
				return res, fmt.Errorf("txinbox/adapters: savepoint: %w", err)
			}
			rcs, err := s.client.ReceiveManyTx(ctx, sp, []inbox.Message{it.msg})
			if errors.Is(err, txinbox.ErrInvalidMessage) {
				if err := sp.Rollback(ctx); err != nil {
					return res, fmt.Errorf("txinbox/adapters: rollback to savepoint: %w", err)
				}
				it.bad = s.undecodable(it.rec, it.msg.Key, it.msg.Kind, err.Error())
				continue
			}
			if err != nil {
				return res, err
			}
			if err := sp.Commit(ctx); err != nil {
				return res, fmt.Errorf("txinbox/adapters: release savepoint: %w", err)
			}
			count(rcs[0], it)
		}
	}
	for i := range items {
		it := &items[i]
		if it.bad == nil {
			continue
		}
		rc, err := s.client.ReceiveUndecodableTx(ctx, tx, *it.bad)
		if err != nil {
			return res, err
		}
		if rc.Outcome == inbox.Duplicate {
			res.Duplicates++
			it.bad.Reason = "" // already stored: do not log it again
		} else {
			res.Undecodable++
		}
	}
	return res, nil
}

func (s *Sink) logOutcomes(items []item) {
	for i := range items {
		if it := &items[i]; it.conflict != 0 {
			s.cfg.Store.Logger.Warn("txinbox/adapters: key reused with a different payload; the stored message is kept and this one dropped",
				"consumer", it.msg.Consumer, "key", it.msg.Key, "kind", it.msg.Kind, "stored_id", it.conflict, "source", it.rec.Source)
		}
		if b := items[i].bad; b != nil && b.Reason != "" {
			s.cfg.Store.Logger.Warn("txinbox/adapters: undecodable message stored dead",
				"consumer", b.Consumer, "key", b.Key, "kind", b.Kind, "source", items[i].rec.Source, "reason", b.Reason)
		}
	}
}

// decode turns r into an inbox message, or into an undecodable one if it cannot be stored as such.
func (s *Sink) decode(r *Record) item {
	r.Headers = sanitizeHeaders(r.Headers)
	ce := r.IsCloudEvent()
	var kind string
	if ce {
		kind = r.CloudEvent[envelope.AttrType]
	}
	if kind == "" {
		kind = r.Type
	}
	if kind == "" {
		kind = HeaderValue(r.Headers, s.cfg.KindHeader)
	}
	if kind == "" {
		kind = s.cfg.DefaultKind
	}
	r.Kind = kind
	key, kerr := s.cfg.Key(r)
	if kerr == nil {
		if err := txinbox.ValidateKey(key); err != nil {
			kerr = fmt.Errorf("invalid key: %w", err)
		}
	}
	var ordering string
	if s.cfg.OrderingKey != nil {
		if k, err := s.cfg.OrderingKey(r); err == nil {
			ordering = k
		}
	} else if ce {
		ordering = r.CloudEvent[envelope.AttrPartitionKey]
	}
	if ce {
		r.Headers = envelopeHeaders(r.Headers, r.CloudEvent)
	}
	it := item{rec: r}
	if kerr != nil {
		it.bad = s.undecodable(r, "", kind, fmt.Sprintf("no valid idempotency key: %v", kerr))
		return it
	}
	if kind == "" {
		it.bad = s.undecodable(r, key, "", fmt.Sprintf("no kind: no CloudEvents type, no type property, no %s header, and no DefaultKind", s.cfg.KindHeader))
		return it
	}
	it.msg = inbox.Message{Consumer: s.cfg.Consumer, Key: key, Kind: kind, Payload: r.Body, Headers: r.Headers, OrderingKey: ordering}
	if err := s.client.Validate(it.msg); err != nil {
		it.bad = s.undecodable(r, key, kind, err.Error())
	}
	return it
}

// envelopeHeaders returns the headers to store for a CloudEvent whose headers are h and attributes
// attrs: h without the broker's prefixed copies of the attributes (ce-id, ce_id, cloudEvents_id,
// ...), with each attribute under "ce-" + its name (decoded), but for the trace context, stored as
// the W3C headers "traceparent" and "tracestate": the protocol's headers (in any case) if h has a
// traceparent, else the envelope's. Those the inbox cannot store are dropped (sanitizeHeaders).
func envelopeHeaders(h, attrs map[string]string) map[string]string {
	out := make(map[string]string, len(h)+len(attrs))
	var tp, ts string
	for name, v := range h {
		switch {
		case envelope.IsCopy(name, attrs):
		case strings.EqualFold(name, txinbox.HeaderTraceParent):
			tp = v
		case strings.EqualFold(name, txinbox.HeaderTraceState):
			ts = v
		default:
			out[name] = v
		}
	}
	if tp == "" {
		tp, ts = attrs[envelope.AttrTraceParent], attrs[envelope.AttrTraceState]
	}
	for name, v := range attrs {
		if name != envelope.AttrTraceParent && name != envelope.AttrTraceState {
			out["ce-"+name] = v
		}
	}
	if tp != "" {
		out[txinbox.HeaderTraceParent] = tp
		if ts != "" {
			out[txinbox.HeaderTraceState] = ts
		}
	}
	return sanitizeHeaders(out)
}

// undecodable builds the dead record of r: an invalid key or kind is replaced (by the content hash of
// the stored bytes, inbox.ContentKey, and "undecodable"), and raw bytes beyond MaxPayloadBytes are cut off, so that it can always be stored.
func (s *Sink) undecodable(r *Record, key, kind, reason string) *inbox.Undecodable {
	if txinbox.ValidateKey(key) != nil {
		key = ""
	}
	if txinbox.ValidateName(kind) != nil {
		kind = ""
	}
	if kind == "" {
		kind = "undecodable"
	}
	raw := r.Body
	if raw == nil {
		raw = []byte{}
	}
	if len(raw) > s.cfg.MaxPayloadBytes {
		reason = fmt.Sprintf("%s (raw bytes truncated from %d to %d)", reason, len(raw), s.cfg.MaxPayloadBytes)
		raw = raw[:s.cfg.MaxPayloadBytes]
	}
	if key == "" {
		key = inbox.ContentKey(kind, raw)
	}
	return &inbox.Undecodable{Consumer: s.cfg.Consumer, Key: key, Kind: kind, Raw: raw, Headers: r.Headers, Reason: reason}
}

// sanitizeHeaders drops the headers that the inbox would reject (inbox.Message.Headers): names of 1
// to limits.HeaderNameBytes and values of at most limits.HeaderValueBytes, of valid UTF-8 without
// control characters, are kept, in name order until their names and values together would pass
// limits.HeadersBytes (a broker configured for very large headers); the rest are dropped. The
// choice depends only on the headers, so every redelivery keeps the same ones.
func sanitizeHeaders(h map[string]string) map[string]string {
	names := make([]string, 0, len(h))
	for k, v := range h {
		if k == "" || !validText(k, limits.HeaderNameBytes) || !validText(v, limits.HeaderValueBytes) {
			delete(h, k)
			continue
		}
		names = append(names, k)
	}
	slices.Sort(names)
	total := 0
	for _, k := range names {
		if total += len(k) + len(h[k]); total > limits.HeadersBytes {
			delete(h, k)
		}
	}
	return h
}

func validText(s string, maxBytes int) bool {
	if len(s) > maxBytes || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}
