// Package conformance is the test suite every broker adapter of txinbox passes, its publisher (an
// outbox.Publisher) and its sink (a consumer storing into an inbox through adapters.Sink) alike. A
// test of the adapter's package calls [Run] with the adapter's [Broker]: a set-up of each test,
// making that test's broker resources (a queue, a stream, a topic, an HTTP endpoint) and the
// publisher or consumer under test. Run runs the tests as parallel subtests, each against a real
// outbox or inbox in a schema of its own (package txinboxtest picks the PostgreSQL server):
//
//   - Deliver: the events of committed transactions arrive at least once, under their event id as
//     the broker's dedup field, with payload and headers (trace context included) unchanged, in a
//     CloudEvents envelope (id, source, type, time, datacontenttype, partitionkey, traceparent,
//     tracestate and nothing else), a key's first arrivals in commit order; those of rolled-back
//     transactions never arrive.
//   - Acknowledgment: an event the broker refuses is retried, never recorded as sent; once the broker
//     takes events again each arrives.
//   - ContextEnd: when the ctx of a Publish call ends part-way, the events the broker did not take
//     fail with ctx's error (never reported acknowledged, never recorded as sent).
//   - Pair: the adapter's own sink, configured with nothing but where to store, stores each event
//     under its id with its kind, its key as ordering key and its trace context, read from the
//     envelope; a message of another producer, with or without an envelope, as that producer meant.
//   - CommitFailure: while the inbox's commit fails, the consumer acknowledges nothing and stores
//     nothing; once commits succeed, each message is stored exactly once.
//   - StoreFailureKeepsOrder: a batch that cannot be stored (the database away) is held and stored
//     before the messages behind it: the inbox receives them in the broker's order.
//
// The suite reads what arrived through the set-ups (Received functions) and each message's
// CloudEvents attributes as a receiver that is not txinbox's code reads them: the broker's test
// decodes them with the CloudEvents SDK's binding for its broker ([Received.CloudEvent]).
package conformance

import (
	"testing"

	"github.com/txinbox/txinbox/adapters/internal/adaptertest"
	"github.com/txinbox/txinbox/adapters/internal/pubtest"
)

// Broker is what a broker adapter's test gives [Run]: for each test of the suite, a function that
// sets it up on t (the subtest's: resources made there are cleaned up when that test ends). Every
// field is required: a nil one fails its subtest.
type Broker struct {
	// Deliver sets up the test Deliver.
	Deliver func(t *testing.T) DeliverSetup
	// Acknowledgment sets up the test Acknowledgment.
	Acknowledgment func(t *testing.T) AckSetup
	// ContextEnd sets up the test ContextEnd.
	ContextEnd func(t *testing.T) ContextEndSetup
	// Pair sets up the test Pair.
	Pair func(t *testing.T) PairSetup
	// CommitFailure sets up the test CommitFailure.
	CommitFailure func(t *testing.T) SinkSetup
	// StoreFailureKeepsOrder sets up the test StoreFailureKeepsOrder: its source must deliver the
	// messages in the order they were published (one queue, one stream, one partition; a sender that
	// sends one at a time, in order).
	StoreFailureKeepsOrder func(t *testing.T) SinkSetup
}

// Run runs every test of the suite against b, each as a parallel subtest of t named as the test
// (Deliver, Acknowledgment, ContextEnd, Pair, CommitFailure, StoreFailureKeepsOrder: with t a
// TestConformance, go test -run 'TestConformance/^Pair$' runs one).
func Run(t *testing.T, b Broker) {
	t.Helper()
	sub := func(name string, missing bool, run func(t *testing.T)) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if missing {
				t.Fatalf("conformance: Broker.%s is nil: every adapter runs every test of the suite", name)
			}
			run(t)
		})
	}
	sub("Deliver", b.Deliver == nil, func(t *testing.T) { deliver(t, pubtest.New(t), b.Deliver(t)) })
	sub("Acknowledgment", b.Acknowledgment == nil, func(t *testing.T) { acknowledgment(t, pubtest.New(t), b.Acknowledgment(t)) })
	sub("ContextEnd", b.ContextEnd == nil, func(t *testing.T) { contextEnd(t, pubtest.New(t), b.ContextEnd(t)) })
	sub("Pair", b.Pair == nil, func(t *testing.T) { pair(t, pubtest.New(t), b.Pair(t)) })
	sub("CommitFailure", b.CommitFailure == nil, func(t *testing.T) { commitFailure(t, adaptertest.NewDB(t), b.CommitFailure(t)) })
	sub("StoreFailureKeepsOrder", b.StoreFailureKeepsOrder == nil, func(t *testing.T) {
		storeFailureKeepsOrder(t, adaptertest.NewDB(t), b.StoreFailureKeepsOrder(t))
	})
}
