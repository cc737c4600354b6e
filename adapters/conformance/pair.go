package conformance

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/txinbox/txinbox/adapters"
	"github.com/txinbox/txinbox/adapters/internal/adaptertest"
	"github.com/txinbox/txinbox/adapters/internal/pubtest"
	"github.com/txinbox/txinbox/outbox"
)

// PairConsumer is the inbox consumer that the sink of the test Pair stores into.
const PairConsumer = "downstream"

// PairSetup is what a broker gives the test Pair: its publisher and its own sink of what it sends.
type PairSetup struct {
	// Publisher is the publisher under test, sending the events of Topic.
	Publisher outbox.Publisher
	// Topic is the events' topic.
	Topic string
	// Start starts the package's own sink of what Publisher sends for Topic (a consumer of the
	// queue, stream or topic; a webhook.Receiver behind the endpoint) with sink as its
	// adapters.SinkConfig, unchanged, and stops it when the test ends.
	Start func(sink adapters.SinkConfig)
	// Plain sends a message of a producer that is not txinbox (no CloudEvents envelope) where Start's
	// sink reads it: id as the broker's message id (the AMQP message-id, the Nats-Msg-Id header, the
	// Kafka x-idempotency-key header, the webhook-id header of a signed request), kind as its x-kind
	// header, headers as its other headers, body as its body.
	Plain func(id, kind string, body []byte, headers map[string]string)
	// Foreign sends a message of a CloudEvents producer that is not txinbox where Start's sink reads
	// it: brokerID as the broker's message id (as for Plain), the attributes attrs in the broker's
	// CloudEvents binding (ce- headers for NATS and HTTP, ce_ for Kafka, cloudEvents_ for AMQP; no
	// percent-encoding is needed for their values), body as its body.
	Foreign func(brokerID string, attrs map[string]string, body []byte)
}

// pair checks that a publisher and its package's sink need no configuration but where to store:
// with a SinkConfig of Store and Consumer only (no Key, KindHeader, DefaultKind or OrderingKey), the
// events a real relay hands to the publisher are stored with key = the event id, kind = the event's
// kind, ordering key = the event's key, and headers = the event's own (the W3C traceparent and
// tracestate among them, by those names, so that the worker's handle span joins the trace) with the
// envelope's attributes under ce- names, decoded and whatever the broker: ce-specversion, ce-id,
// ce-source, ce-type, ce-time, ce-datacontenttype and ce-partitionkey (when the event has a key), and
// no other header named like an attribute (the broker's prefixed copies are dropped). A message of a
// producer that is not txinbox, with the broker's message id and an x-kind header, is stored as
// before: key = that id, kind = x-kind, no ordering key, its headers unchanged and no ce- header. A
// message of another CloudEvents producer, whose broker message id differs from its id attribute, is
// stored under the id attribute, with its type and partitionkey.
func pair(t *testing.T, e *pubtest.Env, h PairSetup) {
	t.Helper()
	type sent struct {
		key, contentType string
		headers          map[string]string
	}
	h.Start(adapters.SinkConfig{Store: e.DB.Store(), Consumer: PairConsumer})
	want := map[string]sent{}
	var msgs []outbox.Message
	for i, key := range []string{"acct 1 ünï", "acct-2", "acct 1 ünï", ""} {
		msgs = append(msgs, outbox.Message{Topic: h.Topic, Key: key, Kind: Kind, ContentType: contentType(i),
			Payload: payload("pair", i), Headers: headers(i)})
	}
	ids := e.Publish(t, true, msgs...)
	for i, id := range ids {
		want[id] = sent{key: msgs[i].Key, contentType: msgs[i].ContentType, headers: msgs[i].Headers}
	}
	res := e.Relay(t, h.Publisher, func(c *outbox.RelayConfig) { c.Source = Source })
	e.WaitSent(t, ids)
	plainHeaders := map[string]string{AppHeader: "plain", "Traceparent": TraceParent}
	h.Plain("plain-1", "legacy.kind", []byte(`{"plain": true}`), maps.Clone(plainHeaders))
	h.Foreign("foreign-broker-1", map[string]string{"specversion": "1.0", "id": "foreign-ce-1", "source": "urn:other",
		"type": "other.happened", "partitionkey": "p-9"}, []byte(`{"foreign": true}`))

	var rows map[string]stored
	adaptertest.WaitFor(t, "every event and the plain message stored", func() bool {
		rows = storedRows(t, e)
		return len(rows) >= len(ids)+2
	})
	if len(rows) != len(ids)+2 {
		t.Errorf("the inbox holds %d messages %v, want %d", len(rows), slices.Sorted(maps.Keys(rows)), len(ids)+2)
	}
	if f, ok := rows["foreign-ce-1"]; !ok || f.state == "dead" || f.kind != "other.happened" || f.ordering != "p-9" || f.headers["ce-source"] != "urn:other" {
		t.Errorf("the other CloudEvents producer's message stored %+v (found %v), want it under its id attribute foreign-ce-1, pending, kind other.happened, ordering key p-9, ce-source urn:other (stored keys %v)",
			f, ok, slices.Sorted(maps.Keys(rows)))
	}
	for _, id := range ids {
		r, ok := rows[id]
		if !ok {
			t.Errorf("event %s is not stored under its id (stored keys %v)", id, slices.Sorted(maps.Keys(rows)))
			continue
		}
		w, ev := want[id], handedOver(t, res, id)
		if r.state == "dead" || r.kind != Kind || r.ordering != w.key {
			t.Errorf("event %s stored %s with kind %q and ordering key %q, want pending, %q and %q (last error %q)",
				id, r.state, r.kind, r.ordering, Kind, w.key, r.lastError)
		}
		ce := map[string]string{
			"ce-specversion": "1.0", "ce-id": id, "ce-source": Source, "ce-type": Kind,
			"ce-time": ev.CreatedAt.UTC().Format(time.RFC3339Nano), "ce-datacontenttype": ev.ContentType,
		}
		if w.key != "" {
			ce["ce-partitionkey"] = w.key
		}
		for name, v := range w.headers {
			if got := r.headers[name]; got != v {
				t.Errorf("event %s stored with header %s = %q, want %q (headers %v)", id, name, got, v, r.headers)
			}
		}
		checkTrace(t, id, r.headers)
		for name, v := range ce {
			if got := r.headers[name]; got != v {
				t.Errorf("event %s stored with header %s = %q, want %q (headers %v)", id, name, got, v, r.headers)
			}
		}
		for name := range r.headers {
			if _, ok := ce[name]; !ok && attributeLike(name) {
				t.Errorf("event %s stored with header %s: want the attributes under ce- names only (headers %v)", id, name, r.headers)
			}
		}
	}
	p, ok := rows["plain-1"]
	switch {
	case !ok:
		t.Errorf("the plain message is not stored under its message id")
	case p.state == "dead" || p.kind != "legacy.kind" || p.ordering != "":
		t.Errorf("the plain message stored %s with kind %q and ordering key %q, want pending, legacy.kind and none (last error %q)",
			p.state, p.kind, p.ordering, p.lastError)
	default:
		for name, v := range plainHeaders {
			if got := adapters.HeaderValue(p.headers, name); got != v {
				t.Errorf("the plain message stored with header %s = %q, want %q (headers %v)", name, got, v, p.headers)
			}
		}
		for name := range p.headers {
			if attributeLike(name) {
				t.Errorf("the plain message stored with header %s, which it was not sent with (headers %v)", name, p.headers)
			}
		}
	}
}

// attributeLike reports whether a header name looks like a CloudEvents attribute's in some binding.
func attributeLike(name string) bool {
	n := strings.ToLower(name)
	return strings.HasPrefix(n, "ce-") || strings.HasPrefix(n, "ce_") || strings.HasPrefix(n, "cloudevents")
}

// stored is a message of [PairConsumer] in the inbox.
type stored struct {
	kind, ordering, state, lastError string
	headers                          map[string]string
}

// storedRows returns the messages of PairConsumer, by key.
func storedRows(t testing.TB, e *pubtest.Env) map[string]stored {
	t.Helper()
	rows, err := e.DB.Pool.Query(context.Background(), e.DB.SQL(`SELECT key, kind, coalesce(ordering_key, ''), state, coalesce(last_error, ''), headers
		FROM {schema}.inbox WHERE consumer = $1`), PairConsumer)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]stored{}
	for rows.Next() {
		var key string
		var s stored
		if err := rows.Scan(&key, &s.kind, &s.ordering, &s.state, &s.lastError, &s.headers); err != nil {
			t.Fatal(fmt.Errorf("inbox row: %w", err))
		}
		out[key] = s
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
