package natsjs

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txinbox/txinbox/adapters"
	"github.com/txinbox/txinbox/adapters/conformance"
)

// TestConformance runs the adapters' conformance suite against NATS JetStream (conformance.Run):
//
//   - Deliver: each committed event is stored in the stream under its id as Nats-Msg-Id, on the
//     subject of its topic, with its headers (trace context included) and its CloudEvents envelope as
//     ce- headers, which the SDK's NATS JetStream binding reads into a valid event; a key's events in
//     commit order; nothing of a rolled-back transaction.
//   - Acknowledgment: while no stream captures the subject, JetStream does not answer the publishes:
//     every attempt fails and is retried, no event is recorded sent; once the stream exists, each event
//     is stored and sent.
//   - ContextEnd: a subject whose PubAcks are held back after the first three (a subscriber answering
//     as a stream would): when the call's ctx ends, the events not yet published and those still
//     awaiting their PubAck fail with ctx's error, and through a relay none of them is recorded sent.
//     Concurrency 4 keeps some events unpublished when ctx ends.
//   - Pair: a Publisher and a Consumer of its stream whose Sink names only the store and the consumer
//     store each event under its id, with its kind, its key as ordering key and its trace context, read
//     from the envelope; a message of another producer (Nats-Msg-Id, x-kind) is stored as before.
//   - CommitFailure: while the inbox commit fails, the batch is held, never acknowledged; once it
//     succeeds, each message is stored once and acknowledged.
//   - StoreFailureKeepsOrder: a batch that cannot be stored is held (its ack deadline extended) and
//     stored again before the messages prefetched behind it, so the inbox receives the stream's
//     messages in their order.
func TestConformance(t *testing.T) {
	t.Parallel()
	conformance.Run(t, conformance.Broker{
		Deliver: func(t *testing.T) conformance.DeliverSetup {
			f := newPubFixture(t)
			f.createStream(t)
			pub := newPublisher(t, PublisherConfig{JetStream: f.js, ExpectStream: f.name})
			return conformance.DeliverSetup{Publisher: pub, Topic: f.name + ".orders",
				Received: func() []conformance.Received { return f.received(t) }}
		},
		Acknowledgment: func(t *testing.T) conformance.AckSetup {
			f := newPubFixture(t)
			pub := newPublisher(t, PublisherConfig{JetStream: f.js})
			return conformance.AckSetup{Publisher: pub, Topic: f.name + ".payments",
				Refuse:   func() {},
				Accept:   func() { f.createStream(t) },
				Received: func() []conformance.Received { return f.received(t) }}
		},
		ContextEnd: func(t *testing.T) conformance.ContextEndSetup {
			f := newPubFixture(t)
			subject := "held_" + f.name + ".x"
			hs := newHoldingStream(t, f.nc, subject)
			pub := newPublisher(t, PublisherConfig{JetStream: f.js, AckTimeout: time.Minute, Concurrency: 4})
			return conformance.ContextEndSetup{Publisher: pub, Topic: subject,
				Hold: hs.hold, Holding: hs.holding, Release: hs.release, Received: hs.received}
		},
		Pair: func(t *testing.T) conformance.PairSetup {
			f := newPubFixture(t)
			f.createStream(t)
			pub := newPublisher(t, PublisherConfig{JetStream: f.js})
			topic := f.name + ".orders"
			return conformance.PairSetup{Publisher: pub, Topic: topic,
				Start: func(sink adapters.SinkConfig) {
					cons, err := f.js.CreateOrUpdateConsumer(context.Background(), f.name, jetstream.ConsumerConfig{Durable: "pair", AckPolicy: jetstream.AckExplicitPolicy})
					if err != nil {
						t.Fatal(err)
					}
					start(t, newConsumer(t, Config{Consumer: cons, Sink: sink}))
				},
				Plain: func(id, kind string, body []byte, headers map[string]string) {
					m := nats.NewMsg(topic)
					m.Data = body
					for name, v := range headers {
						m.Header.Set(name, v)
					}
					m.Header.Set(MsgIDHeader, id)
					m.Header.Set(adapters.DefaultKindHeader, kind)
					if _, err := f.js.PublishMsg(context.Background(), m); err != nil {
						t.Fatal(err)
					}
				},
				Foreign: func(brokerID string, attrs map[string]string, body []byte) {
					m := nats.NewMsg(topic)
					m.Data = body
					for name, v := range attrs {
						m.Header.Set("ce-"+name, v)
					}
					m.Header.Set(MsgIDHeader, brokerID)
					if _, err := f.js.PublishMsg(context.Background(), m); err != nil {
						t.Fatal(err)
					}
				}}
		},
		CommitFailure:          harness,
		StoreFailureKeepsOrder: harness,
	})
}
