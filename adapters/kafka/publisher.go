package kafka

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/adapters"
	"github.com/txinbox/txinbox/adapters/internal/envelope"
	"github.com/txinbox/txinbox/outbox"
)

// deliveryTimeout is the kgo.RecordDeliveryTimeout a Publisher's client gets unless its Options set
// another (PublisherConfig.Options).
const deliveryTimeout = 20 * time.Second

// PublisherConfig configures a [Publisher]. Options are required; every other zero field takes the
// documented default. NewPublisher returns a *txinbox.ConfigError naming the field that is missing or
// wrong.
type PublisherConfig struct {
	// Options configure the franz-go client the publisher makes: kgo.SeedBrokers is required; TLS,
	// SASL, compression and the like go here too. The client produces idempotently (franz-go's
	// default, with acks from all in-sync replicas): kgo.DisableIdempotentWrite and
	// kgo.TransactionalID are refused. kgo.RecordDeliveryTimeout(20s) comes before them (an option of
	// Options overrides it): a record not produced by then fails, so that the copies of an event
	// whose Publish call gave up do not pile up in the client while the cluster is unreachable.
	Options []kgo.Opt
	// IDHeader names the record header that carries the event id. Default
	// adapters.IdempotencyKeyHeader ("x-idempotency-key"), which the kafka Consumer of this package
	// reads as the inbox key by default.
	IDHeader string
}

// Publisher publishes the events of a txinbox outbox (package outbox) to Kafka with franz-go's
// idempotent producer; it implements outbox.Publisher. Make it with [NewPublisher], give it to an
// outbox.Relay, and [Publisher.Close] it after the relay stopped. It is safe for concurrent use.
//
// Each event becomes one record, a CloudEvent in the binary content mode of the Kafka protocol
// binding (the attributes of ev.CloudEvent() as ce_ headers):
//
//	topic            ev.Topic
//	key              ev.Key (no key when it is ""): the default partitioner sends a key's records to
//	                 one partition, where they keep the order the relay hands them over in (commit
//	                 order)
//	ce_specversion   1.0
//	ce_id            ev.ID: the consumer's dedup key
//	ce_source        ev.Source (the relay's RelayConfig.Source)
//	ce_type          ev.Kind: the consumer's kind
//	ce_time          ev.CreatedAt, RFC 3339 in UTC
//	content-type     ev.ContentType (the datacontenttype attribute)
//	ce_partitionkey  ev.Key, when not "": the consumer's ordering key
//	ce_traceparent   the event's traceparent and tracestate headers (the Distributed Tracing
//	ce_tracestate    extension), when it has them: the trace context of the relay's hand-over
//	IDHeader         ev.ID (x-idempotency-key by default)
//	other headers    ev.Headers (traceparent and tracestate among them), by name, first; but those
//	                 named as one of the above (in any case), which it replaces
//	value            ev.Payload, byte for byte
//
// An event is acknowledged when the cluster acknowledged its record (written to every in-sync
// replica). The idempotent producer keeps the client's own retries of a request from writing a
// record twice or out of order; a failed event that the relay hands over again may be written a
// second time under the same id header, which the consumer deduplicates.
type Publisher struct {
	cl       *kgo.Client
	idHeader string
}

// NewPublisher checks cfg and makes the publisher's client (which connects when it first needs to).
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	if len(cfg.Options) == 0 {
		return nil, &txinbox.ConfigError{Field: "Options", Reason: "required (seed brokers)"}
	}
	if cfg.IDHeader == "" {
		cfg.IDHeader = adapters.IdempotencyKeyHeader
	}
	opts := append([]kgo.Opt{kgo.RecordDeliveryTimeout(deliveryTimeout)}, cfg.Options...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, &txinbox.ConfigError{Field: "Options", Reason: err.Error()}
	}
	if off, _ := cl.OptValue(kgo.DisableIdempotentWrite).(bool); off {
		cl.Close()
		return nil, &txinbox.ConfigError{Field: "Options", Reason: "kgo.DisableIdempotentWrite: the publisher needs the idempotent producer"}
	}
	if vs := cl.OptValues(kgo.TransactionalID); len(vs) == 2 && vs[1] == true {
		cl.Close()
		return nil, &txinbox.ConfigError{Field: "Options", Reason: "kgo.TransactionalID: the publisher produces outside Kafka transactions"}
	}
	return &Publisher{cl: cl, idHeader: cfg.IDHeader}, nil
}

var _ outbox.TopicChecker = (*Publisher)(nil)

// CheckTopic implements outbox.TopicChecker: it returns an error for a topic that is not a legal
// Kafka topic name (1 to 249 of the letters, digits, '.', '_' and '-', and neither "." nor ".."), so
// that the relay makes its events dead without producing them, and a Client whose
// Config.TopicChecker is p refuses them. Whether the cluster has the topic (or creates it) is not
// checked: that takes a request, and a topic may be created at any time (a record for a missing one
// fails and is retried).
func (p *Publisher) CheckTopic(topic string) error { return checkTopic(topic) }

// Close closes the client; records still buffered fail. Call it after the relay stopped.
func (p *Publisher) Close() { p.cl.Close() }

// Publish produces each event's record (see [Publisher]) and returns once each was acknowledged or
// failed: nil if all were acknowledged, else an *outbox.BatchError with the error of each failed
// event. A topic that is not a valid Kafka topic name, and a record larger than the client or the
// broker takes (kerr.MessageTooLarge), are permanent (dead at once); every other error is retried.
// When ctx ends, the events not yet acknowledged fail with ctx's error: their records are cancelled
// if franz-go still can, and may otherwise be written later (the relay hands them over again
// meanwhile, under the same id).
func (p *Publisher) Publish(ctx context.Context, events []outbox.Event) error {
	type result struct {
		i   int
		err error
	}
	errs := make([]error, len(events))
	done := make([]bool, len(events))
	results := make(chan result, len(events)) // buffered: a promise never waits for this call
	pending := 0
	for i := range events {
		ev := &events[i]
		if err := checkTopic(ev.Topic); err != nil {
			errs[i], done[i] = txinbox.Permanent(err), true
			continue
		}
		pending++
		p.cl.Produce(ctx, p.record(ev), func(_ *kgo.Record, err error) { results <- result{i, err} })
	}
	for ; pending > 0; pending-- {
		select {
		case r := <-results:
			errs[r.i], done[r.i] = classify(r.err), true
		case <-ctx.Done():
			for i := range errs {
				if !done[i] {
					errs[i] = ctx.Err()
				}
			}
			return outbox.Errors(errs)
		}
	}
	return outbox.Errors(errs)
}

// record returns the record of ev.
func (p *Publisher) record(ev *outbox.Event) *kgo.Record {
	r := &kgo.Record{Topic: ev.Topic, Value: ev.Payload}
	if ev.Key != "" {
		r.Key = []byte(ev.Key)
	}
	hs := envelope.Kafka.Headers(ev, envelope.Header{Name: p.idHeader, Value: ev.ID})
	r.Headers = make([]kgo.RecordHeader, len(hs))
	for i, h := range hs {
		r.Headers[i] = kgo.RecordHeader{Key: h.Name, Value: []byte(h.Value)}
	}
	return r
}

// classify returns the error of a produced record: permanent when no retry can make the cluster take
// it.
func classify(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge) ||
		errors.Is(err, kerr.InvalidTopicException) || errors.Is(err, kerr.InvalidRecord) {
		return txinbox.Permanent(err)
	}
	return err
}

// checkTopic returns an error unless topic is a legal Kafka topic name: 1 to 249 of the letters,
// digits, '.', '_' and '-', and neither "." nor "..".
func checkTopic(topic string) error {
	if topic == "" || len(topic) > 249 || topic == "." || topic == ".." {
		return fmt.Errorf("txinbox/kafka: %q is not a Kafka topic name (1 to 249 characters, not . or ..)", topic)
	}
	for i := 0; i < len(topic); i++ {
		c := topic[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("txinbox/kafka: %q is not a Kafka topic name (letters, digits, '.', '_' and '-' only)", topic)
		}
	}
	return nil
}
