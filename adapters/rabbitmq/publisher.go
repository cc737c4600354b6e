package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/adapters/internal/envelope"
	"github.com/txinbox/txinbox/outbox"
)

// defaultConfirmTimeout is PublisherConfig.ConfirmTimeout when it is zero (documented there).
const defaultConfirmTimeout = 15 * time.Second

// Errors of a Publisher's events (matched with errors.Is); each is a failure the relay retries.
var (
	// ErrNacked: the broker refused the message (basic.nack: a queue at its x-max-length with
	// overflow reject-publish, an internal error), or the channel closed before the broker
	// confirmed it.
	ErrNacked = errors.New("txinbox/rabbitmq: the broker did not confirm the message (nack, or the channel closed)")
	// ErrUnroutable: no queue took the message (the broker returned it as unroutable: no binding of
	// the exchange matches its routing key).
	ErrUnroutable = errors.New("txinbox/rabbitmq: no queue took the message")
	// ErrConfirmTimeout: the broker's confirm did not come within ConfirmTimeout.
	ErrConfirmTimeout = errors.New("txinbox/rabbitmq: no confirm from the broker in time")
	// ErrPublisherClosed: Publish was called after Close.
	ErrPublisherClosed = errors.New("txinbox/rabbitmq: publisher closed")
)

// PublisherConfig configures a [Publisher]. URL is required; every other zero field takes the
// documented default. NewPublisher returns a *txinbox.ConfigError naming the field that is missing
// or negative.
type PublisherConfig struct {
	// URL is the broker address, "amqp://user:password@host:5672/vhost".
	URL string
	// AMQP tunes the connection (TLS, heartbeat, dialer, client properties). Its zero value is what
	// amqp091.Dial uses: 10s heartbeat, 30s connection timeout (which also bounds a Publish call
	// that has to connect).
	AMQP amqp.Config
	// Exchange receives every event, with the event's topic as the routing key. Default "", the
	// default exchange, which routes a message to the queue named by its routing key: then the
	// topic names a queue.
	Exchange string
	// Route, if set, says where each event goes instead: its exchange and routing key (a topic
	// exchange per topic family, say). Default: (Exchange, ev.Topic).
	Route func(ev outbox.Event) (exchange, routingKey string)
	// Setup, if set, runs on every new channel before publishing (after each reconnect too): declare
	// the exchanges, queues and bindings there. An error fails the Publish call, and the next call
	// connects again.
	Setup func(ch *amqp.Channel) error
	// AllowUnroutable publishes without the mandatory flag: a message that no queue takes is then
	// confirmed by the broker and dropped. By default (false) messages are mandatory, and one that no
	// queue takes is a failure of its event ([ErrUnroutable]), retried by the relay until a binding
	// takes it (or the event is dead after MaxAttempts).
	AllowUnroutable bool
	// ConfirmTimeout bounds the wait for the broker's confirms of a Publish call's messages, counted
	// from when they were all sent. An event not confirmed by then fails ([ErrConfirmTimeout]) and
	// the connection is closed (the next call connects again). Default: 15s;
	// it should be less than the relay's Timeout, which bounds the whole call.
	ConfirmTimeout time.Duration
}

// Publisher publishes the events of a txinbox outbox (package outbox) to RabbitMQ with publisher
// confirms; it implements outbox.Publisher. Make it with [NewPublisher], give it to an
// outbox.Relay, and [Publisher.Close] it after the relay stopped. It is safe for concurrent use: the
// Publish calls of a relay's runners share one connection and one channel in confirm mode, opened
// at the first call and opened again after it is lost.
//
// Each event becomes one message, a CloudEvent in the binary content mode of the AMQP protocol
// binding (the attributes of ev.CloudEvent() as cloudEvents_ application properties, which are
// headers in AMQP 0-9-1):
//
//	exchange, routing key     PublisherConfig.Route(ev), by default (PublisherConfig.Exchange, ev.Topic)
//	message-id                ev.ID: the consumer's dedup key
//	type                      ev.Kind: the consumer's kind
//	content-type              ev.ContentType (the datacontenttype attribute)
//	timestamp                 ev.CreatedAt (seconds)
//	delivery mode             persistent (2)
//	cloudEvents_specversion   1.0
//	cloudEvents_id            ev.ID
//	cloudEvents_source        ev.Source (the relay's RelayConfig.Source)
//	cloudEvents_type          ev.Kind
//	cloudEvents_time          ev.CreatedAt, RFC 3339 in UTC
//	cloudEvents_partitionkey  ev.Key, when not "": the consumer's ordering key
//	cloudEvents_traceparent   the event's traceparent and tracestate headers (the Distributed
//	cloudEvents_tracestate    Tracing extension), when it has them: the trace context of the
//	                          relay's hand-over
//	other headers             ev.Headers (traceparent and tracestate among them), but those named
//	                          as one of the above (in any case), which it replaces
//	body                      ev.Payload, byte for byte
//	mandatory                 unless AllowUnroutable
//
// Every header is an AMQP long string (the canonical string form of the attribute).
//
// An event is acknowledged only when the broker confirmed its message with basic.ack (for a
// persistent message to a durable queue: written to disk), and, being mandatory, did not return it
// as unroutable. A nack, a return, a closed channel or no confirm within ConfirmTimeout is a
// failure of that event, which the relay retries: the message may then be in a queue twice, under
// one message-id, and the consumer deduplicates.
//
// Publisher does not implement outbox.TopicChecker: whether a queue takes a routing key depends on
// the broker's exchanges and bindings, known only by publishing (a mandatory message that no queue
// takes fails with [ErrUnroutable], retried: a binding may be added), and the outbox's own topic
// limit (255 bytes) is AMQP's routing key limit.
type Publisher struct {
	cfg PublisherConfig

	mu      sync.Mutex
	s       *pubSession // the open session, if any
	dialing *dial       // the connection attempt in progress, if any
	closed  bool
}

// dial is one connection attempt, which the Publish calls that need a session wait for (each as
// long as its ctx lets it).
type dial struct {
	done chan struct{} // closed when it ended
	err  error         // why it failed; set before done is closed
}

// NewPublisher checks cfg and returns a Publisher. It does not connect: the first Publish does.
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	if cfg.URL == "" {
		return nil, &txinbox.ConfigError{Field: "URL", Reason: "required"}
	}
	switch {
	case cfg.ConfirmTimeout < 0:
		return nil, &txinbox.ConfigError{Field: "ConfirmTimeout", Reason: "must not be negative"}
	case cfg.ConfirmTimeout == 0:
		cfg.ConfirmTimeout = defaultConfirmTimeout
	}
	if cfg.Route == nil {
		exchange := cfg.Exchange
		cfg.Route = func(ev outbox.Event) (string, string) { return exchange, ev.Topic }
	}
	return &Publisher{cfg: cfg}, nil
}

// pubSession is one connection and its channel in confirm mode, with the messages the broker
// returned as unroutable.
type pubSession struct {
	conn *amqp.Connection
	ch   *amqp.Channel

	// returned counts, by message id, the returns not yet claimed by a waiting Publish call.
	mu       sync.Mutex
	returned map[string]int
	// barrier is received by the returns goroutine between two returns: a send on it completes only
	// once every return received before it is counted in returned.
	barrier chan struct{}
	// done is closed when the returns goroutine ended (the channel closed): returned is complete.
	done chan struct{}
}

// session returns the open session, connecting if there is none or it was lost. It waits for the
// connection at most until ctx ends; a connection attempt that outlives ctx goes on in the
// background (bounded by the dialer's timeout), for the next call.
func (p *Publisher) session(ctx context.Context) (*pubSession, error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, ErrPublisherClosed
		}
		if s := p.s; s != nil {
			if !s.conn.IsClosed() && !s.ch.IsClosed() {
				p.mu.Unlock()
				return s, nil
			}
			_ = s.conn.Close()
			p.s = nil
		}
		d := p.dialing
		if d == nil {
			d = &dial{done: make(chan struct{})}
			p.dialing = d
			go p.connect(d)
		}
		p.mu.Unlock()
		select {
		case <-d.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if d.err != nil {
			return nil, d.err
		}
	}
}

// connect makes a session (dial, channel, Setup, confirm mode) and installs it, or records why it
// failed in d.
func (p *Publisher) connect(d *dial) {
	s, err := p.open()
	p.mu.Lock()
	p.dialing = nil
	d.err = err
	if err == nil {
		if p.closed {
			_ = s.conn.Close()
			d.err = ErrPublisherClosed
		} else {
			p.s = s
		}
	}
	p.mu.Unlock()
	close(d.done)
}

// open dials and opens a channel in confirm mode.
func (p *Publisher) open() (*pubSession, error) {
	conn, err := amqp.DialConfig(p.cfg.URL, p.cfg.AMQP)
	if err != nil {
		return nil, fmt.Errorf("txinbox/rabbitmq: dial: %w", err)
	}
	fail := func(step string, err error) (*pubSession, error) {
		_ = conn.Close()
		return nil, fmt.Errorf("txinbox/rabbitmq: %s: %w", step, err)
	}
	ch, err := conn.Channel()
	if err != nil {
		return fail("channel", err)
	}
	if p.cfg.Setup != nil {
		if err := p.cfg.Setup(ch); err != nil {
			return fail("setup", err)
		}
	}
	if err := ch.Confirm(false); err != nil {
		return fail("confirm mode", err)
	}
	s := &pubSession{conn: conn, ch: ch, returned: map[string]int{}, barrier: make(chan struct{}), done: make(chan struct{})}
	// Unbuffered on purpose: the connection's reader hands a return over before it reads the
	// confirm that follows it, so the return is counted before any Publish call sees that confirm
	// (see wasReturned).
	returns := ch.NotifyReturn(make(chan amqp.Return))
	go s.collectReturns(returns)
	return s, nil
}

// collectReturns counts the messages returned on the session's channel until it closes.
func (s *pubSession) collectReturns(returns <-chan amqp.Return) {
	defer close(s.done)
	for {
		select {
		case r, ok := <-returns:
			if !ok {
				return
			}
			s.mu.Lock()
			s.returned[r.MessageId]++
			s.mu.Unlock()
		case <-s.barrier:
		}
	}
}

// wasReturned reports whether the broker returned the message id as unroutable, and claims that
// return. Call it after the message's confirm: the broker sends a message's return before its
// confirm, and the barrier waits until the returns goroutine counted every return handed over
// before (or until the channel closed, after which the count is complete).
func (s *pubSession) wasReturned(id string) bool {
	select {
	case s.barrier <- struct{}{}:
	case <-s.done:
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.returned[id] == 0 {
		return false
	}
	s.returned[id]--
	if s.returned[id] == 0 {
		delete(s.returned, id)
	}
	return true
}

// drop closes s if it is still the publisher's session, so that the next call connects again.
func (p *Publisher) drop(s *pubSession) {
	p.mu.Lock()
	if p.s == s {
		p.s = nil
	}
	p.mu.Unlock()
	// A broker that stopped answering would hold a plain Close for its whole handshake timeout.
	go func() { _ = s.conn.CloseDeadline(time.Now().Add(5 * time.Second)) }()
}

// Publish sends each event as a message (see [Publisher]) and waits for the broker's confirms. It
// returns nil if the broker confirmed every message, else an *outbox.BatchError with the error of
// each failed event ([ErrNacked], [ErrUnroutable], [ErrConfirmTimeout], ctx's error, or the channel's
// error; an event header whose name AMQP cannot carry, longer than 255 bytes, is permanent), or,
// when it cannot connect, one error for all of them.
func (p *Publisher) Publish(ctx context.Context, events []outbox.Event) error {
	s, err := p.session(ctx)
	if err != nil {
		return err
	}
	errs := make([]error, len(events))
	confirms := make([]*amqp.DeferredConfirmation, len(events))
	mandatory := !p.cfg.AllowUnroutable
	for i := range events {
		ev := &events[i]
		msg, err := publishing(ev)
		if err != nil {
			errs[i] = err
			continue
		}
		exchange, key := p.cfg.Route(*ev)
		confirms[i], errs[i] = s.ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, mandatory, false, msg)
	}
	wctx, cancel := context.WithTimeout(ctx, p.cfg.ConfirmTimeout)
	defer cancel()
	timedOut := false
	for i, dc := range confirms {
		if dc == nil {
			continue
		}
		ack, err := dc.WaitContext(wctx)
		switch {
		case err != nil && ctx.Err() != nil:
			errs[i] = ctx.Err()
		case err != nil:
			errs[i] = fmt.Errorf("%w (ConfirmTimeout %v)", ErrConfirmTimeout, p.cfg.ConfirmTimeout)
			timedOut = true
		case !ack && s.ch.IsClosed():
			errs[i] = fmt.Errorf("%w: the channel closed", ErrNacked)
		case !ack:
			errs[i] = ErrNacked
		case mandatory && s.wasReturned(events[i].ID):
			errs[i] = ErrUnroutable
		}
	}
	if timedOut {
		p.drop(s)
	}
	return outbox.Errors(errs)
}

// publishing returns the message of ev.
func publishing(ev *outbox.Event) (amqp.Publishing, error) {
	for name := range ev.Headers {
		if len(name) > 255 {
			return amqp.Publishing{}, txinbox.Permanent(fmt.Errorf("txinbox/rabbitmq: header name of %d bytes: AMQP allows 255", len(name)))
		}
	}
	hs := envelope.AMQP.Headers(ev)
	headers := make(amqp.Table, len(hs))
	for _, h := range hs {
		headers[h.Name] = h.Value
	}
	return amqp.Publishing{
		MessageId:    ev.ID,
		Type:         ev.Kind,
		DeliveryMode: amqp.Persistent,
		ContentType:  envelope.ContentType(ev),
		Timestamp:    ev.CreatedAt,
		Headers:      headers,
		Body:         ev.Payload,
	}, nil
}

// Close closes the connection and makes later Publish calls fail with [ErrPublisherClosed]. Call it
// after the relay that uses the publisher stopped: the calls still waiting for confirms fail.
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	if p.s == nil {
		return nil
	}
	err := p.s.conn.Close()
	p.s = nil
	if errors.Is(err, amqp.ErrClosed) {
		return nil
	}
	return err
}
