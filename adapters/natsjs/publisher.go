package natsjs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/adapters/internal/envelope"
	"github.com/txinbox/txinbox/adapters/internal/hdr"
	"github.com/txinbox/txinbox/outbox"
)

// DefaultAckTimeout is PublisherConfig.AckTimeout when it is zero: give the JetStream context the same
// (jetstream.WithPublishAsyncTimeout), so that its own bound does not fail a publish first.
const DefaultAckTimeout = 5 * time.Second

// defaultConcurrency is PublisherConfig.Concurrency when it is zero (documented there).
const defaultConcurrency = 256

// ErrNoStream is the error of an event whose subject no stream captures (JetStream did not answer
// the publish: no responders). It is retried: a stream may be created or given the subject.
var ErrNoStream = errors.New("txinbox/natsjs: no stream captures the subject")

// PublisherConfig configures a [Publisher]. JetStream is required; every other zero field takes the
// documented default. NewPublisher returns a *txinbox.ConfigError naming the field that is missing
// or negative.
type PublisherConfig struct {
	// JetStream publishes the messages: jetstream.New over the caller's connection, which the caller
	// closes after the relay stopped. Give it jetstream.WithPublishAsyncTimeout (AckTimeout, say):
	// a message whose PubAck never comes fails its event after AckTimeout (retried), but keeps its
	// place among the JetStream's pending asynchronous publishes until that timeout ends it, or the
	// connection is lost.
	JetStream jetstream.JetStream
	// Subject maps an event to the subject it is published on. Default: the event's topic. A stream
	// must capture the subject.
	Subject func(ev outbox.Event) string
	// ExpectStream, if set, makes JetStream refuse a message unless the stream that captures its
	// subject has this name (jetstream.WithExpectStream): such an event fails, and is retried.
	ExpectStream string
	// AckTimeout bounds each message's wait for its PubAck, from when it was published. Default
	// DefaultAckTimeout (5s); it should be less than the relay's Timeout, which bounds the whole
	// Publish call.
	AckTimeout time.Duration
	// Concurrency is the most messages of one Publish call awaiting their PubAck at once (the events
	// of a call have distinct keys, so they need no order among them): they are published
	// asynchronously (jetstream.PublishMsgAsync), and the oldest is awaited when this many are
	// pending. Default: 256. Keep it times the relay's Concurrency within the
	// JetStream's limit of pending asynchronous publishes (jetstream.WithPublishAsyncMaxPending,
	// 4,000 by default): past it, PublishMsgAsync waits, then fails the event (retried).
	Concurrency int
}

// Publisher publishes the events of a txinbox outbox (package outbox) to NATS JetStream; it
// implements outbox.Publisher. Make it with [NewPublisher] and give it to an outbox.Relay. It is safe
// for concurrent use.
//
// Each event becomes one message, a CloudEvent in the binary content mode of the NATS protocol
// binding (the attributes of ev.CloudEvent() as ce- headers):
//
//	subject              PublisherConfig.Subject(ev), by default ev.Topic
//	ce-specversion       1.0
//	ce-id                ev.ID: the consumer's dedup key (the natsjs Consumer's default key)
//	ce-source            ev.Source (the relay's RelayConfig.Source)
//	ce-type              ev.Kind: the consumer's kind
//	ce-time              ev.CreatedAt, RFC 3339 in UTC
//	ce-datacontenttype   ev.ContentType
//	ce-partitionkey      ev.Key, when not "": the consumer's ordering key
//	ce-traceparent       the event's traceparent and tracestate headers (the Distributed Tracing
//	ce-tracestate        extension), when it has them: the trace context of the relay's hand-over
//	Nats-Msg-Id          ev.ID: JetStream drops a message whose id it saw within the stream's
//	                     duplicate window (StreamConfig.Duplicates, 2 minutes by default)
//	other headers        ev.Headers (traceparent and tracestate among them), but those named as one
//	                     of the above (in any case), which it replaces
//	data                 ev.Payload, byte for byte
//
// The values of the ce- headers are percent-encoded as the binding says (a space, a double quote, a
// percent sign and every byte outside printable ASCII become %XY): a natsjs Consumer decodes them.
//
// An event is acknowledged when JetStream answered its publish with a PubAck: the stream stored
// the message (or, with PubAck.Duplicate, had stored it before under the same id). No answer within
// AckTimeout, no stream for the subject ([ErrNoStream]), an error answer (a stream that refuses the
// message: ExpectStream not matched, the stream full with DiscardNew) or a lost connection is a
// failure of that event, which the relay retries under the same Nats-Msg-Id: within the duplicate
// window JetStream stores it once; a retry after the window may store a second copy, which the
// consumer deduplicates.
type Publisher struct {
	cfg          PublisherConfig
	opts         []jetstream.PublishOpt
	topicSubject bool // PublisherConfig.Subject was nil: an event's subject is its topic
}

var _ outbox.TopicChecker = (*Publisher)(nil)

// CheckTopic implements outbox.TopicChecker. When PublisherConfig.Subject is unset (an event's
// subject is its topic), it returns an error for a topic that is not a subject a message can be
// published on (empty, with whitespace, an empty token or a wildcard), so that the relay makes its
// events dead without publishing them, and a Client whose Config.TopicChecker is p refuses them.
// With a Subject function the subject depends on the whole event, so every topic is accepted here
// (an event whose subject is not one is still dead at its first attempt, in Publish). Whether a stream captures the subject is
// not checked: that takes a request to the server, and a stream may be created or given the
// subject at any time (an event that no stream captures fails with [ErrNoStream] and is retried).
func (p *Publisher) CheckTopic(topic string) error {
	if !p.topicSubject {
		return nil
	}
	return checkSubject(topic)
}

// NewPublisher checks cfg and returns a Publisher.
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	if cfg.JetStream == nil {
		return nil, &txinbox.ConfigError{Field: "JetStream", Reason: "required"}
	}
	switch {
	case cfg.AckTimeout < 0:
		return nil, &txinbox.ConfigError{Field: "AckTimeout", Reason: "must not be negative"}
	case cfg.AckTimeout == 0:
		cfg.AckTimeout = DefaultAckTimeout
	}
	switch {
	case cfg.Concurrency < 0:
		return nil, &txinbox.ConfigError{Field: "Concurrency", Reason: "must not be negative"}
	case cfg.Concurrency == 0:
		cfg.Concurrency = defaultConcurrency
	}
	topicSubject := cfg.Subject == nil
	if topicSubject {
		cfg.Subject = func(ev outbox.Event) string { return ev.Topic }
	}
	p := &Publisher{cfg: cfg, topicSubject: topicSubject}
	if cfg.ExpectStream != "" {
		p.opts = append(p.opts, jetstream.WithExpectStream(cfg.ExpectStream))
	}
	return p, nil
}

// Publish publishes each event (see [Publisher]) asynchronously (jetstream.PublishMsgAsync), with up
// to Concurrency of them awaiting their PubAck at once, and returns once each was acknowledged by a
// PubAck or failed: nil if all were acknowledged, else an *outbox.BatchError with the error of each
// failed event. An event whose subject is not a valid publish subject (empty, with whitespace, an
// empty token or a wildcard), whose header name is not an HTTP token, or that exceeds the server's
// maximum payload is permanent (dead at once).
func (p *Publisher) Publish(ctx context.Context, events []outbox.Event) error {
	errs := make([]error, len(events))
	type inFlight struct {
		i       int
		subject string
		f       jetstream.PubAckFuture
		sent    time.Time
	}
	// The messages awaiting their PubAck, oldest first: JetStream answers in about the order it was
	// sent, so the oldest is awaited when the window is full, and at the end.
	window := make([]inFlight, 0, min(len(events), p.cfg.Concurrency))
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	await := func() {
		m := window[0]
		window = window[1:]
		wait := time.Until(m.sent.Add(p.cfg.AckTimeout))
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-m.f.Ok():
		case err := <-m.f.Err():
			errs[m.i] = p.failed(m.subject, err)
		case <-timer.C:
			errs[m.i] = fmt.Errorf("txinbox/natsjs: no PubAck within %v: %w", p.cfg.AckTimeout, context.DeadlineExceeded)
		case <-ctx.Done():
			errs[m.i] = ctx.Err()
		}
		timer.Stop()
	}
	for i := range events {
		if ctx.Err() != nil {
			errs[i] = ctx.Err()
			continue
		}
		for len(window) >= p.cfg.Concurrency {
			await()
		}
		subject := p.cfg.Subject(events[i])
		m, err := p.msg(subject, &events[i])
		if err != nil {
			errs[i] = err
			continue
		}
		f, err := p.cfg.JetStream.PublishMsgAsync(m, p.opts...)
		if err != nil {
			errs[i] = p.failed(subject, err)
			continue
		}
		window = append(window, inFlight{i: i, subject: subject, f: f, sent: time.Now()})
	}
	for len(window) > 0 {
		await()
	}
	return outbox.Errors(errs)
}

// msg returns the message of ev, or the permanent error of an event that cannot be one.
func (p *Publisher) msg(subject string, ev *outbox.Event) (*nats.Msg, error) {
	if err := checkSubject(subject); err != nil {
		return nil, txinbox.Permanent(err)
	}
	for name := range ev.Headers {
		if !hdr.Token(name) {
			return nil, txinbox.Permanent(fmt.Errorf("txinbox/natsjs: header name %q is not a token", name))
		}
	}
	hs := envelope.NATS.Headers(ev, envelope.Header{Name: jetstream.MsgIDHeader, Value: ev.ID})
	m := &nats.Msg{Subject: subject, Data: ev.Payload, Header: make(nats.Header, len(hs))}
	values := make([]string, len(hs)) // one allocation for every header's value
	for i, h := range hs {
		values[i] = h.Value
		m.Header[h.Name] = values[i : i+1 : i+1]
	}
	return m, nil
}

// failed returns the error of an event whose publish on subject failed with err.
func (p *Publisher) failed(subject string, err error) error {
	switch {
	case errors.Is(err, jetstream.ErrNoStreamResponse):
		return fmt.Errorf("%w %q: %v", ErrNoStream, subject, err)
	case errors.Is(err, nats.ErrMaxPayload):
		return txinbox.Permanent(err)
	case errors.Is(err, jetstream.ErrAsyncPublishTimeout):
		return fmt.Errorf("txinbox/natsjs: no PubAck in time (the JetStream's async publish timeout): %w", err)
	default:
		return err
	}
}

// checkSubject returns an error unless s is a subject a message can be published on.
func checkSubject(s string) error {
	if s == "" || strings.ContainsAny(s, " \t\r\n") {
		return fmt.Errorf("txinbox/natsjs: %q is not a subject (empty, or with whitespace)", s)
	}
	for tok := range strings.SplitSeq(s, ".") {
		if tok == "" || tok == "*" || tok == ">" {
			return fmt.Errorf("txinbox/natsjs: %q is not a subject to publish on (an empty token or a wildcard)", s)
		}
	}
	return nil
}
