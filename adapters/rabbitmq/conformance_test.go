package rabbitmq

import (
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txinbox/txinbox/adapters"
	"github.com/txinbox/txinbox/adapters/conformance"
	"github.com/txinbox/txinbox/outbox"
)

// TestConformance runs the adapters' conformance suite against RabbitMQ (conformance.Run):
//
//   - Deliver: each committed event arrives in the queue its topic names, with its id as message-id,
//     its kind as type, its content type as content-type, its creation as timestamp, persistent, its
//     headers (trace context included) as AMQP headers and its CloudEvents envelope as cloudEvents_
//     headers, which map onto a valid event of the SDK; a key's events in commit order; nothing of a
//     rolled-back transaction.
//   - Acknowledgment: the queue is full (x-max-length with overflow reject-publish), so the broker
//     nacks every message: each attempt fails and is retried, no event is recorded sent; once the queue
//     is purged the events are confirmed, sent and consumed under their ids.
//   - ContextEnd: the broker gets only the first three publishes (a proxy holds the later frames), so
//     it confirms no later message: when the call's ctx ends, the events awaiting their confirm fail
//     with ctx's error, and through a relay none of them is recorded sent.
//   - Pair: a Publisher and a Consumer of its queue whose Sink names only the store and the consumer
//     store each event under its id, with its kind, its key as ordering key and its trace context, read
//     from the envelope; a message of another producer (message-id, x-kind) is stored as before.
//   - CommitFailure: while the inbox commit fails, the batch is held, never acknowledged; once it
//     succeeds, each message is stored once and acknowledged.
//   - StoreFailureKeepsOrder: a batch that cannot be stored is held, unacknowledged, and stored again
//     before the deliveries prefetched behind it, so the inbox receives the queue's messages in their
//     order.
func TestConformance(t *testing.T) {
	t.Parallel()
	conformance.Run(t, conformance.Broker{
		Deliver: func(t *testing.T) conformance.DeliverSetup {
			url := brokerURL(t)
			q, _ := declare(t, url, nil)
			c := collect(t, url, q)
			pub := newPublisher(t, PublisherConfig{URL: url})
			return conformance.DeliverSetup{Publisher: pub, Topic: q, Received: c.received,
				Check: func(t testing.TB, r conformance.Received, ev outbox.Event) {
					for _, d := range c.deliveries() {
						if d.MessageId != r.ID {
							continue
						}
						if d.DeliveryMode != amqp.Persistent || d.Type != ev.Kind || d.ContentType != ev.ContentType || !d.Timestamp.Equal(ev.CreatedAt.Truncate(time.Second)) {
							t.Errorf("message %s: delivery mode %d, type %q, content type %q, timestamp %v; want persistent, %q, %q, %v",
								d.MessageId, d.DeliveryMode, d.Type, d.ContentType, d.Timestamp, ev.Kind, ev.ContentType, ev.CreatedAt.Truncate(time.Second))
						}
					}
				}}
		},
		Acknowledgment: func(t *testing.T) conformance.AckSetup {
			url := brokerURL(t)
			const capacity = 5
			q, ch := declare(t, url, amqp.Table{"x-max-length": capacity, "x-overflow": "reject-publish"})
			var c *collector
			var mu sync.Mutex
			pub := newPublisher(t, PublisherConfig{URL: url})
			return conformance.AckSetup{Publisher: pub, Topic: q,
				Refuse: func() {
					fill := make([]amqp.Publishing, capacity)
					for i := range fill {
						fill[i] = amqp.Publishing{MessageId: fmt.Sprintf("filler-%d", i), Body: []byte(`{}`)}
					}
					publish(t, ch, q, fill...)
				},
				Accept: func() {
					if _, err := ch.QueuePurge(q, false); err != nil {
						t.Fatal(err)
					}
					mu.Lock()
					c = collect(t, url, q)
					mu.Unlock()
				},
				Received: func() []conformance.Received {
					mu.Lock()
					defer mu.Unlock()
					return c.received()
				},
			}
		},
		ContextEnd: func(t *testing.T) conformance.ContextEndSetup {
			broker := brokerURL(t)
			q, _ := declare(t, broker, nil)
			u, err := url.Parse(broker)
			if err != nil {
				t.Fatal(err)
			}
			g := newPublishGate(t, u.Host)
			u.Host = g.ln.Addr().String()
			pub := newPublisher(t, PublisherConfig{URL: u.String(), ConfirmTimeout: time.Minute})
			return conformance.ContextEndSetup{Publisher: pub, Topic: q,
				Hold: g.hold, Holding: g.holding, Release: g.release, Received: drain(t, broker, q)}
		},
		Pair: func(t *testing.T) conformance.PairSetup {
			url := brokerURL(t)
			q, ch := declare(t, url, nil)
			pub := newPublisher(t, PublisherConfig{URL: url})
			return conformance.PairSetup{Publisher: pub, Topic: q,
				Start: func(sink adapters.SinkConfig) { start(t, newConsumer(t, Config{URL: url, Queue: q, Sink: sink})) },
				Plain: func(id, kind string, body []byte, headers map[string]string) {
					h := amqp.Table{adapters.DefaultKindHeader: kind}
					for name, v := range headers {
						h[name] = v
					}
					publish(t, ch, q, amqp.Publishing{MessageId: id, Headers: h, Body: body})
				},
				Foreign: func(brokerID string, attrs map[string]string, body []byte) {
					h := amqp.Table{}
					for name, v := range attrs {
						h["cloudEvents_"+name] = v
					}
					publish(t, ch, q, amqp.Publishing{MessageId: brokerID, ContentType: "application/json", Headers: h, Body: body})
				}}
		},
		CommitFailure:          harness,
		StoreFailureKeepsOrder: harness,
	})
}
