package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txinbox/txinbox/adapters/natsjs"
	"github.com/txinbox/txinbox/adapters/rabbitmq"
	"github.com/txinbox/txinbox/outbox"
)

// outboxBrokerConn is a broker connection with a stream or queue of its own for one run.
type outboxBrokerConn interface {
	// topic is the subject or queue name the events go to (the relay's event topic).
	topic() string
	relayPublisher() (outbox.Publisher, error)
	watermillPublisher() (message.Publisher, error)
	// rawPublisher returns a publisher for one raw loop.
	rawPublisher() (rawPublisher, error)
	// stored returns the number of messages the stream or queue holds, waiting up to a few seconds
	// for want.
	stored(ctx context.Context, want int) (int, error)
	// close deletes the stream or queue and closes the connection.
	close(ctx context.Context)
}

// rawEvent is an event of the raw loop.
type rawEvent struct {
	id      string
	payload []byte
	created time.Time
}

// rawSource is the CloudEvents source of the raw loop's events (the relay's is "/txinbox/<schema>").
const rawSource = "/txbench/raw"

// rawEnvelope returns the CloudEvents attributes (binary mode) of a raw loop's event sent to topic,
// as the relay's publishers send an event without a key or trace context: specversion, id, source,
// type (the topic, the relay's default kind), time and, unless the broker carries it as a property,
// datacontenttype; each name with the binding's prefix.
func rawEnvelope(prefix string, ev rawEvent, topic string, contentType bool) [][2]string {
	h := [][2]string{{prefix + "specversion", "1.0"}, {prefix + "id", ev.id}, {prefix + "source", rawSource},
		{prefix + "type", topic}, {prefix + "time", ev.created.UTC().Format(time.RFC3339Nano)}}
	if contentType {
		h = append(h, [2]string{prefix + "datacontenttype", "application/json"})
	}
	return h
}

// rawPublisher publishes a batch of events at once and waits for all their acknowledgments.
type rawPublisher interface {
	publish(ctx context.Context, evs []rawEvent) error
	close()
}

func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// natsBroker is a JetStream stream TXBENCH_<random> capturing the subject txbench.<random>.events.
type natsBroker struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	stream  string
	subject string
}

func newNATSBroker(ctx context.Context, url string) (*natsBroker, error) {
	nc, err := nats.Connect(url, nats.Name("txbench"))
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	sfx := randomSuffix()
	b := &natsBroker{nc: nc, js: js, stream: "TXBENCH_" + strings.ToUpper(sfx), subject: "txbench." + sfx + ".events"}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: b.stream, Subjects: []string{b.subject}, Storage: jetstream.FileStorage}); err != nil {
		nc.Close()
		return nil, err
	}
	return b, nil
}

func (b *natsBroker) topic() string { return b.subject }

func (b *natsBroker) relayPublisher() (outbox.Publisher, error) {
	return natsjs.NewPublisher(natsjs.PublisherConfig{JetStream: b.js, ExpectStream: b.stream})
}

func (b *natsBroker) watermillPublisher() (message.Publisher, error) {
	return &watermillJetStream{js: b.js, opts: []jetstream.PublishOpt{jetstream.WithExpectStream(b.stream)}}, nil
}

func (b *natsBroker) rawPublisher() (rawPublisher, error) {
	return &rawJetStream{js: b.js, subject: b.subject}, nil
}

func (b *natsBroker) stored(ctx context.Context, want int) (int, error) {
	s, err := b.js.Stream(ctx, b.stream)
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, err
	}
	return int(info.State.Msgs), nil
}

func (b *natsBroker) close(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_ = b.js.DeleteStream(ctx, b.stream)
	b.nc.Close()
}

// watermillJetStream is a Watermill message.Publisher to JetStream, written for the bench because no
// Watermill NATS package is available here: like one, it publishes each message and waits for its
// PubAck before the next, with the message's UUID as Nats-Msg-Id and its metadata as headers.
type watermillJetStream struct {
	js   jetstream.JetStream
	opts []jetstream.PublishOpt
}

func (w *watermillJetStream) Publish(topic string, msgs ...*message.Message) error {
	for _, msg := range msgs {
		m := nats.NewMsg(topic)
		m.Data = msg.Payload
		for k, v := range msg.Metadata {
			m.Header.Set(k, v)
		}
		m.Header.Set(jetstream.MsgIDHeader, msg.UUID)
		if _, err := w.js.PublishMsg(msg.Context(), m, w.opts...); err != nil {
			return err
		}
	}
	return nil
}

func (w *watermillJetStream) Close() error { return nil }

// rawJetStream publishes with PublishMsgAsync and waits for every PubAck.
type rawJetStream struct {
	js      jetstream.JetStream
	subject string
}

func (r *rawJetStream) publish(ctx context.Context, evs []rawEvent) error {
	futures := make([]jetstream.PubAckFuture, len(evs))
	for i, ev := range evs {
		m := nats.NewMsg(r.subject)
		m.Data = ev.payload
		for _, h := range rawEnvelope("ce-", ev, r.subject, true) {
			m.Header[h[0]] = []string{h[1]}
		}
		m.Header.Set(jetstream.MsgIDHeader, ev.id)
		f, err := r.js.PublishMsgAsync(m)
		if err != nil {
			return err
		}
		futures[i] = f
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (r *rawJetStream) close() {}

// amqpBroker is a durable RabbitMQ queue txbench.<random>, reached through the default exchange.
type amqpBroker struct {
	url     string
	queue   string
	conn    *amqp.Connection
	ch      *amqp.Channel
	closers []func() error
}

func newAMQPBroker(ctx context.Context, url string) (*amqpBroker, error) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	b := &amqpBroker{url: url, queue: "txbench." + randomSuffix(), conn: conn, ch: ch}
	if _, err := ch.QueueDeclare(b.queue, true, false, false, false, nil); err != nil {
		_ = conn.Close()
		return nil, err
	}
	return b, nil
}

func (b *amqpBroker) topic() string { return b.queue }

func (b *amqpBroker) relayPublisher() (outbox.Publisher, error) {
	p, err := rabbitmq.NewPublisher(rabbitmq.PublisherConfig{URL: b.url})
	if err != nil {
		return nil, err
	}
	b.closers = append(b.closers, p.Close)
	return p, nil
}

func (b *amqpBroker) watermillPublisher() (message.Publisher, error) {
	cfg := wmamqp.NewDurableQueueConfig(b.url)
	cfg.Publish.ConfirmDelivery = true
	return wmamqp.NewPublisher(cfg, watermill.NopLogger{})
}

func (b *amqpBroker) rawPublisher() (rawPublisher, error) {
	ch, err := b.conn.Channel()
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, err
	}
	return &rawAMQP{ch: ch, queue: b.queue}, nil
}

func (b *amqpBroker) stored(ctx context.Context, want int) (int, error) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		q, err := b.ch.QueueDeclarePassive(b.queue, true, false, false, false, nil)
		if err != nil {
			return 0, err
		}
		if err := ctx.Err(); err != nil {
			return q.Messages, err
		}
		if q.Messages >= want || time.Now().After(deadline) {
			return q.Messages, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (b *amqpBroker) close(context.Context) {
	for _, c := range b.closers {
		_ = c()
	}
	_, _ = b.ch.QueueDelete(b.queue, false, false, false)
	_ = b.conn.Close()
}

// rawAMQP publishes on a channel of its own in confirm mode and waits for every confirm.
type rawAMQP struct {
	ch    *amqp.Channel
	queue string
}

func (r *rawAMQP) publish(ctx context.Context, evs []rawEvent) error {
	confirms := make([]*amqp.DeferredConfirmation, len(evs))
	for i, ev := range evs {
		headers := amqp.Table{}
		for _, h := range rawEnvelope("cloudEvents_", ev, r.queue, false) {
			headers[h[0]] = h[1]
		}
		dc, err := r.ch.PublishWithDeferredConfirmWithContext(ctx, "", r.queue, false, false, amqp.Publishing{
			MessageId: ev.id, Type: r.queue, DeliveryMode: amqp.Persistent, ContentType: "application/json",
			Timestamp: ev.created, Headers: headers, Body: ev.payload,
		})
		if err != nil {
			return err
		}
		confirms[i] = dc
	}
	for _, dc := range confirms {
		ok, err := dc.WaitContext(ctx)
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("rabbitmq: nack")
		}
	}
	return nil
}

func (r *rawAMQP) close() { _ = r.ch.Close() }
