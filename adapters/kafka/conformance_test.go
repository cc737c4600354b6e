package kafka

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txinbox/txinbox/adapters"
	"github.com/txinbox/txinbox/adapters/conformance"
)

// TestConformance runs the adapters' conformance suite against Kafka (conformance.Run; the in-process
// kfake cluster):
//
//   - Deliver: each committed event is written to its topic with the event's Key as record key and its
//     id in the x-idempotency-key header, its headers (trace context included) kept and its CloudEvents
//     envelope as ce_ headers and content-type, which the SDK's Kafka binding reads into a valid event;
//     a key's events in commit order (one partition per key); nothing of a rolled-back transaction.
//   - Acknowledgment: while the cluster fails every produce request, every attempt fails and is
//     retried, no event is recorded sent; once it takes them, each is written and sent.
//   - ContextEnd: the broker leading one of the topic's two partitions leaves its produce requests
//     unanswered: when the call's ctx ends, the events whose records wait fail with ctx's error, and
//     through a relay none of them is recorded sent.
//   - Pair: a Publisher and a Consumer of its topic whose Sink names only the store and the consumer
//     store each event under its id, with its kind, its key as ordering key and its trace context, read
//     from the envelope; a record of another producer (x-idempotency-key, x-kind) is stored as before.
//   - CommitFailure: while the inbox commit fails, the batch is kept and stored again, its offsets
//     never committed; once it succeeds, each record is stored once and its offset committed.
//   - StoreFailureKeepsOrder: a batch that cannot be stored is kept and stored again, never skipped,
//     before the records fetched behind it, so the inbox receives a partition's records in offset
//     order.
func TestConformance(t *testing.T) {
	t.Parallel()
	conformance.Run(t, conformance.Broker{
		Deliver: func(t *testing.T) conformance.DeliverSetup {
			pc := newPubCluster(t)
			received := pc.consume(t)
			pub := newPublisher(t, PublisherConfig{Options: []kgo.Opt{kgo.SeedBrokers(pc.seeds...)}})
			if off, _ := pub.cl.OptValue(kgo.DisableIdempotentWrite).(bool); off {
				t.Fatal("the publisher's client is not idempotent")
			}
			return conformance.DeliverSetup{Publisher: pub, Topic: pc.topic, Received: received, RecordKey: true}
		},
		Acknowledgment: func(t *testing.T) conformance.AckSetup {
			pc := newPubCluster(t)
			received := pc.consume(t)
			// The client retries a refused request itself (after refreshing its metadata: a short
			// MetadataMinAge keeps the test quick); a record it cannot write within the delivery timeout
			// fails, and the relay retries the event.
			pub := newPublisher(t, PublisherConfig{Options: []kgo.Opt{kgo.SeedBrokers(pc.seeds...), kgo.RecordDeliveryTimeout(time.Second), kgo.MetadataMinAge(50 * time.Millisecond)}})
			t.Cleanup(func() {
				if pc.refused.Load() == 0 {
					t.Error("no produce request was refused")
				}
			})
			return conformance.AckSetup{Publisher: pub, Topic: pc.topic,
				Refuse:   func() { pc.refuse.Store(true) },
				Accept:   func() { pc.refuse.Store(false) },
				Received: received}
		},
		ContextEnd: func(t *testing.T) conformance.ContextEndSetup {
			hc := newHoldingCluster(t)
			pub := newPublisher(t, PublisherConfig{Options: []kgo.Opt{kgo.SeedBrokers(hc.c.ListenAddrs()...), kgo.RecordDeliveryTimeout(time.Minute)}})
			return conformance.ContextEndSetup{Publisher: pub, Topic: hc.topic,
				Hold: hc.hold, Holding: hc.holding, Release: hc.unhold, Received: func() []conformance.Received { return hc.received(t) }}
		},
		Pair: func(t *testing.T) conformance.PairSetup {
			f := newFixture(t)
			pub := newPublisher(t, PublisherConfig{Options: []kgo.Opt{kgo.SeedBrokers(f.seeds...)}})
			return conformance.PairSetup{Publisher: pub, Topic: f.topic,
				Start: func(sink adapters.SinkConfig) { start(t, newConsumer(t, f.config(sink))) },
				Plain: func(id, kind string, body []byte, headers map[string]string) {
					r := &kgo.Record{Value: body, Headers: []kgo.RecordHeader{
						{Key: adapters.IdempotencyKeyHeader, Value: []byte(id)}, {Key: adapters.DefaultKindHeader, Value: []byte(kind)}}}
					for name, v := range headers {
						r.Headers = append(r.Headers, kgo.RecordHeader{Key: name, Value: []byte(v)})
					}
					f.produce(t, r)
				},
				Foreign: func(brokerID string, attrs map[string]string, body []byte) {
					r := &kgo.Record{Value: body, Headers: []kgo.RecordHeader{{Key: adapters.IdempotencyKeyHeader, Value: []byte(brokerID)}}}
					for name, v := range attrs {
						r.Headers = append(r.Headers, kgo.RecordHeader{Key: "ce_" + name, Value: []byte(v)})
					}
					f.produce(t, r)
				}}
		},
		CommitFailure:          harness,
		StoreFailureKeepsOrder: harness,
	})
}
