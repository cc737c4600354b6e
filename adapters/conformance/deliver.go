package conformance

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/txinbox/txinbox/adapters/internal/adaptertest"
	"github.com/txinbox/txinbox/adapters/internal/envelope"
	"github.com/txinbox/txinbox/adapters/internal/pubtest"
	"github.com/txinbox/txinbox/outbox"
)

// The trace context of the publishing transaction that every event the checks publish carries, as
// the W3C headers traceparent and tracestate (what a txotel.Tracer's Inject writes
// into outbox.Message.Headers), and a header of the application's.
const (
	TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	TraceState  = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
	AppHeader   = "x-tenant"
)

// traceContext returns the headers OpenTelemetry's W3C propagator writes for the span context of
// TraceParent and TraceState, as a publishing service's code does (txotel.Tracer.Inject).
func traceContext() map[string]string {
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ts, _ := trace.ParseTraceState(TraceState)
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: true})
	h := map[string]string{}
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), propagation.MapCarrier(h))
	return h
}

// checkTrace fails t unless the headers a message arrived with carry the trace context it was
// published with: the propagator reads back the same span context (trace, parent span, flags,
// state), so that the consumer's span joins the publisher's trace.
func checkTrace(t testing.TB, id string, got map[string]string) {
	t.Helper()
	carrier := propagation.MapCarrier{}
	for name, v := range got {
		carrier[strings.ToLower(name)] = v
	}
	sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), carrier))
	if !sc.IsValid() || sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.SpanID().String() != "00f067aa0ba902b7" ||
		!sc.IsSampled() || sc.TraceState().String() != TraceState {
		t.Errorf("event %s: the trace context read from its headers is %+v, want trace 4bf92f35…, span 00f067aa…, sampled, state %s", id, sc, TraceState)
	}
}

// Received is one message as its broker (or webhook endpoint) took it.
type Received struct {
	// ID is the broker's dedup field: the AMQP message-id, the Nats-Msg-Id header, the Kafka id
	// header, the webhook-id header.
	ID string
	// Key is the Kafka record key; "" for brokers without one.
	Key     string
	Payload []byte
	// Headers are the message's headers as the receiver read them (the broker's own included).
	Headers map[string]string
	// CloudEvent holds the CloudEvents context attributes of the message, by name, as a receiver
	// that is not txinbox's code reads them: package internal/cetest, the CloudEvents SDK's
	// protocol bindings, which also validate the event. The test Deliver requires it of every message.
	CloudEvent map[string]string
	// CloudEventErr is why that receiver could not read a valid event from the message, if it could
	// not.
	CloudEventErr error
}

// Source is the RelayConfig.Source of the relays of the tests Deliver and Pair: the CloudEvents
// source of their events.
const Source = "urn:txinbox:pubtest"

// payload is the JSON body of the n-th event the checks publish.
func payload(what string, n int) []byte {
	return fmt.Appendf(nil, `{"what": %q, "n": %d, "text": "ünïcödé \"quoted\""}`, what, n)
}

// headers returns the headers every event the checks publish carries: a trace context and an
// application header.
func headers(n int) map[string]string {
	h := traceContext()
	h[AppHeader] = fmt.Sprintf("tenant-%d", n)
	return h
}

// Kind is the kind of the events that the tests Deliver and Pair publish (not their topic, which is
// the default kind).
const Kind = "order.placed"

// contentType is the content type of the n-th event the checks publish: outbox.DefaultContentType,
// or every other one a JSON media type with a parameter.
func contentType(n int) string {
	if n%2 == 0 {
		return ""
	}
	return "application/json;charset=utf-8"
}

// handedOver returns the event id as the relay of res handed it over (its first hand-over, of an
// attempt that was recorded). An event arrives before its relay records the attempt (in the
// transaction of its next claim): it waits for the record.
func handedOver(t testing.TB, res *pubtest.Results, id string) outbox.Event {
	t.Helper()
	var ev outbox.Event
	adaptertest.WaitFor(t, "the relay's record of an attempt of "+id+", which arrived", func() bool {
		var ok bool
		ev, ok = res.Handed(id)
		return ok && len(res.Of(id)) > 0
	})
	return ev
}

// checkEnvelope fails t unless the CloudEvents attributes r arrived with are those of ev's
// envelope: specversion, id, source, type, time, datacontenttype, partitionkey (when ev has a key),
// traceparent and tracestate (its trace context), and no other.
func checkEnvelope(t testing.TB, r Received, ev outbox.Event) {
	t.Helper()
	if r.CloudEventErr != nil {
		t.Errorf("event %s: a CloudEvents receiver cannot read it: %v", r.ID, r.CloudEventErr)
		return
	}
	if r.CloudEvent == nil {
		t.Fatalf("event %s: the harness read no CloudEvents attributes (Received.CloudEvent): read the message with internal/cetest", r.ID)
	}
	want := map[string]string{
		envelope.AttrSpecVersion: "1.0", envelope.AttrID: ev.ID, envelope.AttrSource: Source, envelope.AttrType: Kind,
		envelope.AttrTime: ev.CreatedAt.UTC().Format(time.RFC3339Nano), envelope.AttrDataContentType: cmp.Or(ev.ContentType, "?"),
		envelope.AttrTraceParent: TraceParent, envelope.AttrTraceState: TraceState,
	}
	if ev.Key != "" {
		want[envelope.AttrPartitionKey] = ev.Key
	}
	if ev.Source != Source || ev.Kind != Kind || ev.ContentType == "" {
		t.Fatalf("event %s was handed over with source %q, kind %q, content type %q: want %q, %q and one", ev.ID, ev.Source, ev.Kind, ev.ContentType, Source, Kind)
	}
	if !maps.Equal(r.CloudEvent, want) {
		t.Errorf("event %s arrived with the CloudEvents attributes\n%v\nwant\n%v", r.ID, r.CloudEvent, want)
	}
}

// DeliverSetup is what a broker gives the test Deliver: its publisher and where its messages arrive.
type DeliverSetup struct {
	// Publisher is the publisher under test, sending the events of Topic to where Received reads.
	Publisher outbox.Publisher
	// Topic is the events' topic: one the broker takes (a queue's routing key, a subject of a
	// stream, a topic of the cluster, a webhook endpoint's).
	Topic string
	// Received returns every message that arrived so far, in the order of arrival (for Kafka: in
	// each partition's order).
	Received func() []Received
	// RecordKey says that the broker carries the event's Key as the record key (Kafka): each
	// message's Received.Key is then checked.
	RecordKey bool
	// Check, if set, checks the broker's own fields of a message r that arrived for the event ev
	// (as the relay handed it over): the AMQP type, content-type and timestamp properties, say.
	Check func(t testing.TB, r Received, ev outbox.Event)
}

// deliver checks a publisher through a real relay over a real outbox: the events of committed
// transactions (three keys, several events per key and per transaction, and events without a key,
// some published before the relay starts and some while it runs) each arrive at least once, under
// their event id as the broker's dedup field, with their payload byte for byte and their headers
// (trace context included) unchanged, in a CloudEvents envelope (Received.CloudEvent, as the SDK
// reads it): specversion 1.0, id, source (the relay's Source), type (the event's kind), time (its
// creation), datacontenttype, partitionkey (its key, when it has one), traceparent and tracestate
// (its trace context), nothing else; the first arrivals of a key's events follow the order of the
// commits (the relay is the only writer); the events of rolled-back transactions never arrive.
func deliver(t *testing.T, e *pubtest.Env, h DeliverSetup) {
	t.Helper()
	type sent struct {
		key     string
		payload []byte
		headers map[string]string
	}
	want := map[string]sent{} // by event id
	var order []string        // committed event ids, in commit order
	n := 0
	round := func(commit bool) {
		var msgs []outbox.Message
		for _, key := range []string{"order-1", "order-2", "order-3", "order-1", ""} {
			n++
			what := "committed"
			if !commit {
				what = "rolled back"
			}
			msgs = append(msgs, outbox.Message{Topic: h.Topic, Key: key, Kind: Kind, ContentType: contentType(n), Payload: payload(what, n), Headers: headers(n)})
		}
		ids := e.Publish(t, commit, msgs...)
		if !commit {
			return
		}
		for i, id := range ids {
			want[id] = sent{key: msgs[i].Key, payload: msgs[i].Payload, headers: msgs[i].Headers}
			order = append(order, id)
		}
	}
	for i := range 4 {
		round(i != 1)
	}
	res := e.Relay(t, h.Publisher, func(c *outbox.RelayConfig) { c.Source = Source })
	for i := range 4 {
		round(i != 2)
	}
	e.WaitSent(t, order)
	if got := e.DB.Count(t, `SELECT count(*) FROM {schema}.outbox`); got != int64(len(order)) {
		t.Errorf("the outbox holds %d events, want the %d committed ones", got, len(order))
	}

	var got []Received
	adaptertest.WaitFor(t, "every sent event to arrive", func() bool {
		got = h.Received()
		seen := map[string]bool{}
		for _, r := range got {
			if _, ok := want[r.ID]; !ok { // it will not become right by waiting
				t.Fatalf("a message arrived under id %q, which no committed event has (payload %s, headers %v)", r.ID, r.Payload, r.Headers)
			}
			seen[r.ID] = true
		}
		for _, id := range order {
			if !seen[id] {
				return false
			}
		}
		return true
	})
	first := map[string]bool{}
	arrivals := map[string][]string{} // key → first arrivals of its events
	for _, r := range got {
		w := want[r.ID]
		if string(r.Payload) != string(w.payload) {
			t.Errorf("event %s arrived with payload %s, want %s", r.ID, r.Payload, w.payload)
		}
		for name, v := range w.headers {
			if r.Headers[name] != v {
				t.Errorf("event %s arrived with header %s = %q, want %q (headers %v)", r.ID, name, r.Headers[name], v, r.Headers)
			}
		}
		checkTrace(t, r.ID, r.Headers)
		ev := handedOver(t, res, r.ID)
		checkEnvelope(t, r, ev)
		if h.Check != nil {
			h.Check(t, r, ev)
		}
		if h.RecordKey && r.Key != w.key {
			t.Errorf("event %s arrived with record key %q, want %q", r.ID, r.Key, w.key)
		}
		if !first[r.ID] {
			first[r.ID] = true
			arrivals[w.key] = append(arrivals[w.key], r.ID)
		}
	}
	for key, ids := range arrivals {
		if key == "" {
			continue
		}
		var wantIDs []string
		for _, id := range order {
			if want[id].key == key {
				wantIDs = append(wantIDs, id)
			}
		}
		if !slices.Equal(ids, wantIDs) {
			t.Errorf("key %s: events arrived in the order %v, want the commit order %v", key, ids, wantIDs)
		}
	}
	t.Logf("%d events committed, %d messages arrived (%d keys)", len(order), len(got), len(slices.Collect(maps.Keys(arrivals))))
}
