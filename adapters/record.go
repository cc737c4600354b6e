// Package adapters feeds messages from message brokers into a txinbox inbox.
//
// The broker packages (rabbitmq, natsjs, kafka) consume from their broker, turn every delivery into a
// Record, and hand each fetched batch to a Sink, which writes the whole batch into the inbox in one
// transaction. They acknowledge the batch to the broker only after that transaction committed, so a
// crash at any point leads to a redelivery, which the inbox rejects as a duplicate: each message is
// stored once. This package holds what the broker packages share: the Record, the key strategies
// (KeyFunc) and the Sink.
package adapters

import (
	"errors"
	"fmt"
	"strings"

	"github.com/txinbox/txinbox/adapters/internal/envelope"
	"github.com/txinbox/txinbox/inbox"
)

// Record is the broker-neutral view of one delivered message, as key functions see it.
type Record struct {
	// Source is the queue (RabbitMQ), the stream (JetStream) or the topic (Kafka) it came from.
	Source string
	// Partition is the Kafka partition; 0 for the other brokers.
	Partition int32
	// Offset is the Kafka offset or the JetStream stream sequence: stable across redeliveries. It is
	// -1 where the broker has no such position (RabbitMQ).
	Offset int64
	// MessageID is the AMQP message-id property, or the Nats-Msg-Id header; empty for Kafka.
	MessageID string
	// Type is the AMQP type property; empty for the other brokers.
	Type string
	// RecordKey is the Kafka record key; nil for the other brokers.
	RecordKey []byte
	// Kind is the kind resolved for the message (see SinkConfig.KindHeader), or "" if there is none.
	Kind string
	// Headers are the broker headers as text (values that are not text are formatted, see the broker
	// packages). Headers that the inbox cannot store (control characters, too long) are left out.
	Headers map[string]string
	// CloudEvent holds the CloudEvents attributes the message carries in its broker's protocol
	// binding, by attribute name ("id", "source", "type", "partitionkey", ...), decoded: the ce-
	// headers of NATS (and of an HTTP request), the ce_ headers and content-type of Kafka, the
	// cloudEvents_ headers and content-type property of AMQP. Nil when it carries none. A record is a
	// CloudEvent when it has a "specversion" attribute (see [Record.IsCloudEvent]): the Sink then
	// reads its key, kind, ordering key and trace context from the envelope (see [Sink.Store]).
	CloudEvent map[string]string
	// Body is the message body, which must be a JSON document.
	Body []byte
	// Raw is the broker's own message: amqp091.Delivery (rabbitmq), jetstream.Msg (natsjs) or
	// *kgo.Record (kafka), for key functions that need more.
	Raw any
}

// IsCloudEvent reports whether r carries a CloudEvents envelope: a specversion attribute.
func (r *Record) IsCloudEvent() bool { return r.CloudEvent[envelope.AttrSpecVersion] != "" }

// KeyFunc derives the idempotency key of a record. It returns an error (usually wrapping ErrNoKey) if
// the record has no key of its kind; the Sink then stores the message dead (see Sink.Store).
//
// The strategies of this package return what the broker gave, unchecked (FirstOf takes the first
// non-empty one, valid or not). The Sink checks the key with txinbox.ValidateKey: a record whose key is
// missing, empty, longer than 512 bytes (txinbox.ValidateKey), not valid UTF-8, or holds a control character such
// as NUL is not an error of Store. It is stored dead, with its raw bytes and the reason ("no valid
// idempotency key: ...") as its last error, keyed by inbox.ContentKey(kind, raw) (so a redelivery is
// a duplicate of it), in the same transaction as the rest of its batch; the batch is then
// acknowledged, and no row stored before is changed. A header that the inbox cannot store (NUL,
// invalid UTF-8, control characters, over 8192 bytes) is dropped before key functions run, so
// Header finds no key in it.
type KeyFunc func(r *Record) (string, error)

// ErrNoKey is returned (wrapped) by the key strategies of this package when a record lacks the field
// they read.
var ErrNoKey = errors.New("txinbox/adapters: no idempotency key")

// MessageID reads Record.MessageID: the AMQP message-id property or the JetStream Nats-Msg-Id header.
func MessageID() KeyFunc {
	return func(r *Record) (string, error) {
		if r.MessageID == "" {
			return "", fmt.Errorf("%w: no message id", ErrNoKey)
		}
		return r.MessageID, nil
	}
}

// CloudEventID reads the id attribute of a record that is a CloudEvent ([Record.IsCloudEvent]): the
// event id of a txinbox outbox's publishers, whatever the broker. It is the first strategy of every
// broker package's default key.
func CloudEventID() KeyFunc {
	return func(r *Record) (string, error) {
		if !r.IsCloudEvent() {
			return "", fmt.Errorf("%w: not a CloudEvent", ErrNoKey)
		}
		if id := r.CloudEvent[envelope.AttrID]; id != "" {
			return id, nil
		}
		return "", fmt.Errorf("%w: no CloudEvents id", ErrNoKey)
	}
}

// Header reads the header name, such as "x-idempotency-key" or "Nats-Msg-Id". An exact match is
// preferred; otherwise the name is matched without regard to case.
func Header(name string) KeyFunc {
	return func(r *Record) (string, error) {
		if v := HeaderValue(r.Headers, name); v != "" {
			return v, nil
		}
		return "", fmt.Errorf("%w: no %s header", ErrNoKey, name)
	}
}

// HeaderValue returns the value of header name in h: an exact match if there is one, otherwise the
// first match without regard to case (in no particular order), otherwise "".
func HeaderValue(h map[string]string, name string) string {
	if v, ok := h[name]; ok {
		return v
	}
	for k, v := range h {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return ""
}

// RecordKey reads the Kafka record key. A record key usually names an entity (all events of one order
// share it), not one message: use it only if the producer gives each message its own record key.
func RecordKey() KeyFunc {
	return func(r *Record) (string, error) {
		if len(r.RecordKey) == 0 {
			return "", fmt.Errorf("%w: no record key", ErrNoKey)
		}
		return string(r.RecordKey), nil
	}
}

// Coordinates is the broker-coordinates strategy: inbox.BrokerKey(Source, Partition, Offset), that is
// "topic:partition:offset" for Kafka and "stream:0:sequence" for JetStream. It is stable across
// redeliveries of one record but does not catch a producer that publishes the same message twice (the
// copies get distinct offsets). RabbitMQ has no such coordinates.
func Coordinates() KeyFunc {
	return func(r *Record) (string, error) {
		if r.Offset < 0 {
			return "", fmt.Errorf("%w: the broker gives no stable position", ErrNoKey)
		}
		return inbox.BrokerKey(r.Source, r.Partition, r.Offset), nil
	}
}

// ContentHash is the last-resort strategy: inbox.ContentKey(Kind, Body), the SHA-256 of kind and body.
// Two distinct messages with the same kind and body are then stored, and applied, once.
func ContentHash() KeyFunc {
	return func(r *Record) (string, error) {
		return inbox.ContentKey(r.Kind, r.Body), nil
	}
}

// FirstOf tries each strategy in order and returns the first key found. If none finds one, it returns
// their errors joined.
func FirstOf(fns ...KeyFunc) KeyFunc {
	return func(r *Record) (string, error) {
		var errs []error
		for _, fn := range fns {
			k, err := fn(r)
			if err == nil && k != "" {
				return k, nil
			}
			if err == nil {
				err = fmt.Errorf("%w: empty key", ErrNoKey)
			}
			errs = append(errs, err)
		}
		if len(errs) == 0 {
			return "", fmt.Errorf("%w: no key strategy", ErrNoKey)
		}
		return "", errors.Join(errs...)
	}
}
