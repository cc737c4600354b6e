package conformance

import (
	"slices"
	"testing"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/adapters/internal/adaptertest"
	"github.com/txinbox/txinbox/adapters/internal/pubtest"
	"github.com/txinbox/txinbox/outbox"
)

// AckSetup is what a broker gives the test Acknowledgment: its publisher and a way to make its broker
// refuse the events, then take them again.
type AckSetup struct {
	// Publisher is the publisher under test, sending the events of Topic.
	Publisher outbox.Publisher
	// Topic is the events' topic.
	Topic string
	// Refuse makes the broker refuse every event of Topic (a RabbitMQ nack, no JetStream stream for
	// the subject, failed Kafka produce requests, a 503 from the webhook endpoint). The test calls it
	// before it publishes anything.
	Refuse func()
	// Accept makes the broker take the events of Topic again.
	Accept func()
	// Received returns every message the broker took so far (the test calls it only after Accept).
	Received func() []Received
	// Relay, if set, adjusts the relay's configuration (a shorter Timeout, say).
	Relay func(*outbox.RelayConfig)
}

// acknowledgment checks a publisher's acknowledgment rule through a real relay: while its broker
// refuses the events (Refuse), every attempt fails and is retried, and no event is recorded as sent;
// once the broker takes them again (Accept), each is sent and arrives under its id. A publisher that
// reported an event acknowledged without the broker's acknowledgment would have it recorded sent
// while the broker refused it, and the event would never arrive.
func acknowledgment(t *testing.T, e *pubtest.Env, h AckSetup) {
	t.Helper()
	h.Refuse()
	var msgs []outbox.Message
	for i, key := range []string{"acct-1", "acct-2", "acct-1", ""} {
		msgs = append(msgs, outbox.Message{Topic: h.Topic, Key: key, Payload: payload("refused first", i), Headers: headers(i)})
	}
	ids := e.Publish(t, true, msgs...)
	res := e.Relay(t, h.Publisher, h.Relay)
	for _, id := range []string{ids[0], ids[1], ids[3]} { // ids[2] waits behind ids[0], its key's
		adaptertest.WaitFor(t, "two failed attempts of each event while the broker refuses", func() bool {
			r := e.Row(t, id)
			return r.AttemptsFailed >= 2 || r.State != "pending" // not pending: the check below fails
		})
	}
	for i, id := range ids {
		if r := e.Row(t, id); r.State != "pending" {
			t.Fatalf("event %d (%s) is %s while the broker refuses every event: the publisher acknowledged what the broker did not (last error %q)", i, id, r.State, r.LastError)
		}
	}
	for _, r := range res.All() {
		if r.Outcome != txinbox.OutcomeRetry || r.Err == nil {
			t.Fatalf("attempt of event %s while the broker refuses: outcome %s, error %v; want a retried failure", r.EventID, r.Outcome, r.Err)
		}
	}
	t.Logf("while refused: %d failed attempts, e.g. %v", len(res.All()), res.All()[0].Err)

	h.Accept()
	e.WaitSent(t, ids)
	adaptertest.WaitFor(t, "every event to arrive once the broker takes them", func() bool {
		seen := map[string]bool{}
		for _, r := range h.Received() {
			if !slices.Contains(ids, r.ID) {
				t.Fatalf("a message arrived under id %q, which no event has", r.ID)
			}
			seen[r.ID] = true
		}
		for _, id := range ids {
			if !seen[id] {
				return false
			}
		}
		return true
	})
}
