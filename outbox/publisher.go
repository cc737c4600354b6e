package outbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/txinbox/txinbox"
)

// Event is a committed event that a [Relay] hands to its [Publisher].
type Event struct {
	// ID is the event's id (a UUID in its 36-character text form), the same on every attempt and
	// from every relay: send it as the message's idempotency key (the AMQP message-id, NATS
	// Nats-Msg-Id, a Kafka header, Standard Webhooks' webhook-id), so that the consumer applies the
	// event once however often it arrives (txinbox's inbox: inbox.Message.Key).
	ID string
	// Topic, Key, Payload and Headers are the published [Message]'s; Key is "" when it had none.
	// Headers carry the trace context of this hand-over (traceparent, tracestate) when the Store has
	// a Tracer, else the one recorded by Publish, if any.
	Topic   string
	Key     string
	Payload []byte
	Headers map[string]string
	// Kind and ContentType are the published Message's, defaults applied (the topic;
	// DefaultContentType).
	Kind        string
	ContentType string
	// Source names the service that published the event: RelayConfig.Source.
	Source string
	// CreatedAt is the start of the transaction that published the event.
	CreatedAt time.Time
	// Attempt is this attempt's number, from 1. It counts every attempt claimed, those of relays that
	// died before finishing included.
	Attempt int
}

// CloudEvent returns the context attributes of the CloudEvents 1.0 event that ev is sent as, by
// name (the payload is its data, byte for byte: binary content mode):
//
//	specversion      "1.0"
//	id               ID
//	source           Source
//	type             Kind
//	time             CreatedAt, RFC 3339 in UTC
//	datacontenttype  ContentType
//	partitionkey     Key (the Partitioning extension), only when Key is not ""
//	traceparent      Headers["traceparent"] (the Distributed Tracing extension), when present
//	tracestate       Headers["tracestate"], when present with a traceparent
//
// Every publisher of the adapters module writes them into its broker's headers as that broker's
// CloudEvents protocol binding says (ce- headers for HTTP and NATS, ce_ headers for Kafka,
// cloudEvents_ headers for AMQP), and every sink reads them back: the id as the inbox key, the type
// as its kind, the partitionkey as its ordering key, the trace context as its headers'.
func (e *Event) CloudEvent() map[string]string {
	a := map[string]string{
		"specversion": "1.0", "id": e.ID, "source": e.Source, "type": e.Kind,
		"time": e.CreatedAt.UTC().Format(time.RFC3339Nano), "datacontenttype": e.ContentType,
	}
	if e.Key != "" {
		a["partitionkey"] = e.Key
	}
	if tp := e.Headers[txinbox.HeaderTraceParent]; tp != "" {
		a[txinbox.HeaderTraceParent] = tp
		if ts := e.Headers[txinbox.HeaderTraceState]; ts != "" {
			a[txinbox.HeaderTraceState] = ts
		}
	}
	return a
}

// Publisher sends events to a broker. Adapters (RabbitMQ with publisher confirms, NATS JetStream,
// a Kafka idempotent producer, HTTP webhooks) implement it.
//
// Publish sends events and returns once each of them is either acknowledged by the broker (durably
// accepted: the relay then marks it sent and never hands it over again) or failed. It returns nil
// when every event was acknowledged, a [*BatchError] (see [Errors]) when some failed, with the error of
// each event at its index, and any other error when all of them failed. An error wrapped with
// [txinbox.Permanent] makes its event dead at once; every other error is retried after the relay's Backoff,
// until MaxAttempts attempts have started.
//
// The events of one call have distinct keys (or none): no event of one call must wait for another,
// so they may be sent in any order and at once. A key's next event comes in a later call, after this
// one was acknowledged or made dead. ctx ends at RelayConfig.Timeout or when the relay stops: return
// then, with ctx's error for the events not acknowledged. Publish may be called from several
// goroutines at once (RelayConfig.Concurrency), and an event may be handed over again after it was
// acknowledged (see [Relay]): the consumer deduplicates by Event.ID.
type Publisher interface {
	Publish(ctx context.Context, events []Event) error
}

// TopicChecker is an optional interface of a [Publisher] that knows, without sending anything, that
// it cannot deliver some topics (a name the broker refuses, a topic without an endpoint). The
// adapters' webhook, Kafka and NATS JetStream publishers implement it (see each one's CheckTopic
// for what it checks); RabbitMQ's does not.
//
// A [Relay] whose Publisher implements it asks CheckTopic about each event's topic before handing
// the event over: an event whose topic is refused is dead at its first attempt, never handed to
// Publish, its error matching [ErrTopicRefused] and wrapping CheckTopic's (a [txinbox.PermanentError]).
// A [Client] whose Config.TopicChecker is set (the relay's Publisher, say) asks it in Publish too,
// which then refuses the message before anything is written.
//
// A Publisher that wraps another (to log, count or filter what it hands over) hides the wrapped
// one's CheckTopic unless it implements TopicChecker itself, asking the wrapped Publisher if that is
// one (a [PublisherFunc] does not).
//
// CheckTopic returns nil when the topic may be delivered, or when that cannot be known without
// sending; an error only when no retry can deliver an event of the topic. It must be fast, do no I/O
// and be safe for concurrent use: it is called once per topic of each batch (and of each Publish
// call).
type TopicChecker interface {
	CheckTopic(topic string) error
}

// ErrTopicRefused is matched (errors.Is) by the error of an event whose topic the relay's Publisher
// refuses ([TopicChecker]): the event is dead at once, and was never handed to Publish.
var ErrTopicRefused = errors.New("txinbox: the publisher does not accept the topic")

// PublisherFunc adapts a function to [Publisher].
type PublisherFunc func(ctx context.Context, events []Event) error

// Publish calls f.
func (f PublisherFunc) Publish(ctx context.Context, events []Event) error { return f(ctx, events) }

// BatchError reports the events of a Publish call that failed: Errs[i] is the error of the call's
// events[i], nil if it was acknowledged. Its length must be that of the call's events; a relay
// treats a BatchError of another length as the failure of every event.
type BatchError struct {
	Errs []error
}

func (e *BatchError) Error() string {
	var b strings.Builder
	failed := 0
	for i, err := range e.Errs {
		if err == nil {
			continue
		}
		failed++
		if failed <= 3 {
			fmt.Fprintf(&b, "; event %d: %v", i, err)
		}
	}
	if failed > 3 {
		fmt.Fprintf(&b, "; and %d more", failed-3)
	}
	return fmt.Sprintf("txinbox: %d of %d events failed%s", failed, len(e.Errs), b.String())
}

// Unwrap returns the errors of the failed events.
func (e *BatchError) Unwrap() []error {
	var out []error
	for _, err := range e.Errs {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}

// Errors returns nil if every error of errs is nil, else a *[BatchError] holding errs: what a
// Publisher returns for a call whose events[i] ended with errs[i].
func Errors(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return &BatchError{Errs: errs}
		}
	}
	return nil
}
