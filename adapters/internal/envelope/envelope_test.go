package envelope

import (
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/txinbox/txinbox/outbox"
)

// TestPercentEncodingFollowsTheBindings: the HTTP and NATS bindings' example ("Euro € 😀") encodes as
// they show; a space, a double quote, a percent sign and control characters are encoded, the rest of
// printable ASCII is not; decoding accepts lower-case hexadecimal, needless encodings and quoted
// strings, and refuses malformed sequences and bytes that are not UTF-8 (the overlong %C0%A0).
func TestPercentEncodingFollowsTheBindings(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"Euro € 😀", "Euro%20%E2%82%AC%20%F0%9F%98%80"},
		{`a "b" 100%`, "a%20%22b%22%20100%25"},
		{"application/json; charset=utf-8", "application/json;%20charset=utf-8"},
		{"tab\there\x7f", "tab%09here%7F"},
		{"!#$&'()*+,-./09:;<=>?@AZ[\\]^_`az{|}~", "!#$&'()*+,-./09:;<=>?@AZ[\\]^_`az{|}~"},
		{"", ""},
	} {
		if got := PercentEncode(c.in); got != c.want {
			t.Errorf("PercentEncode(%q) = %q, want %q", c.in, got, c.want)
		}
		if back, err := PercentDecode(c.want); err != nil || back != c.in {
			t.Errorf("PercentDecode(%q) = %q, %v; want %q", c.want, back, err, c.in)
		}
	}
	for in, want := range map[string]string{
		"%e2%82%ac":          "€",
		"%41%42c":            "ABc",
		`"quoted \"value\""`: `quoted "value"`,
		`"a%20b"`:            "a b",
		"plain":              "plain",
	} {
		if got, err := PercentDecode(in); err != nil || got != want {
			t.Errorf("PercentDecode(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"%C0%A0", "%FF", "%", "%4", "%zz", "a%2", `"unterminated`, `"bad " quote"`, `"ends in \"`, "\xff"} {
		if got, err := PercentDecode(in); !errors.Is(err, ErrEncoding) {
			t.Errorf("PercentDecode(%q) = %q, %v; want an error matching ErrEncoding", in, got, err)
		}
	}
}

func event() *outbox.Event {
	return &outbox.Event{ID: "0190a1b2-0000-7000-8000-000000000001", Topic: "orders", Key: "order 7 €", Kind: "order.paid",
		ContentType: "application/json", Source: "/shop", CreatedAt: time.Date(2026, 3, 4, 5, 6, 7, 8000, time.FixedZone("x", 3600)),
		Headers: map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tracestate": "k=v",
			"x-tenant": "t1", "CE-ID": "forged", "Nats-Msg-Id": "forged", "content-type": "text/plain"}}
}

// TestHeadersPerBinding: each binding writes every attribute of the envelope under its prefix (but
// datacontenttype where the binding puts it), the broker's own headers last, and the event's headers
// (the trace context's among them) first, by name, without those named (in any case) like one
// written after them; Attributes reads back the attributes the event was sent with.
func TestHeadersPerBinding(t *testing.T) {
	t.Parallel()
	ev := event()
	attrs := ev.CloudEvent()
	own := Header{"Nats-Msg-Id", ev.ID}
	for _, c := range []struct {
		name string
		b    Binding
		want []Header
	}{
		{"NATS", NATS, []Header{{"content-type", "text/plain"}, {"traceparent", attrs["traceparent"]}, {"tracestate", "k=v"}, {"x-tenant", "t1"},
			{"ce-specversion", "1.0"}, {"ce-id", ev.ID}, {"ce-source", "/shop"}, {"ce-type", "order.paid"},
			{"ce-time", "2026-03-04T04:06:07.000008Z"}, {"ce-datacontenttype", "application/json"},
			{"ce-partitionkey", "order%207%20%E2%82%AC"}, {"ce-traceparent", attrs["traceparent"]}, {"ce-tracestate", "k=v"}, own}},
		{"HTTP", HTTP, []Header{{"traceparent", attrs["traceparent"]}, {"tracestate", "k=v"}, {"x-tenant", "t1"},
			{"ce-specversion", "1.0"}, {"ce-id", ev.ID}, {"ce-source", "/shop"}, {"ce-type", "order.paid"},
			{"ce-time", "2026-03-04T04:06:07.000008Z"}, {"Content-Type", "application/json"},
			{"ce-partitionkey", "order%207%20%E2%82%AC"}, {"ce-traceparent", attrs["traceparent"]}, {"ce-tracestate", "k=v"}, own}},
		{"Kafka", Kafka, []Header{{"CE-ID", "forged"}, {"traceparent", attrs["traceparent"]}, {"tracestate", "k=v"}, {"x-tenant", "t1"},
			{"ce_specversion", "1.0"}, {"ce_id", ev.ID}, {"ce_source", "/shop"}, {"ce_type", "order.paid"},
			{"ce_time", "2026-03-04T04:06:07.000008Z"}, {"content-type", "application/json"},
			{"ce_partitionkey", "order 7 €"}, {"ce_traceparent", attrs["traceparent"]}, {"ce_tracestate", "k=v"}, own}},
		{"AMQP", AMQP, []Header{{"CE-ID", "forged"}, {"content-type", "text/plain"}, {"traceparent", attrs["traceparent"]}, {"tracestate", "k=v"}, {"x-tenant", "t1"},
			{"cloudEvents_specversion", "1.0"}, {"cloudEvents_id", ev.ID}, {"cloudEvents_source", "/shop"}, {"cloudEvents_type", "order.paid"},
			{"cloudEvents_time", "2026-03-04T04:06:07.000008Z"},
			{"cloudEvents_partitionkey", "order 7 €"}, {"cloudEvents_traceparent", attrs["traceparent"]}, {"cloudEvents_tracestate", "k=v"}, own}},
	} {
		got := c.b.Headers(ev, own)
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: headers\n%v\nwant\n%v", c.name, got, c.want)
			continue
		}
		h := map[string]string{}
		for _, x := range got {
			h[x.Name] = x.Value
		}
		back := c.b.Attributes(h)
		want := maps.Clone(attrs)
		if c.b.NoContentType {
			delete(want, AttrDataContentType) // the caller reads AMQP's content-type property
		}
		if !maps.Equal(back, want) {
			t.Errorf("%s: attributes read back %v, want %v", c.name, back, want)
		}
	}
}

// TestAttributesReading: prefixes match in any case (and AMQP's ':' separator), names come out in
// lower case, a value that does not decode is left out, a message without a prefixed header has no
// attributes (nil, even with a Content-Type), and IsCopy recognizes the prefixed copies of the
// attributes in every binding.
func TestAttributesReading(t *testing.T) {
	t.Parallel()
	got := HTTP.Attributes(map[string]string{"Ce-Id": "a%20b", "CE-SPECVERSION": "1.0", "ce-type": "%C0%A0", "content-type": "application/json", "x": "y"})
	want := map[string]string{"id": "a b", "specversion": "1.0", "datacontenttype": "application/json"}
	if !maps.Equal(got, want) {
		t.Errorf("HTTP attributes %v, want %v", got, want)
	}
	if got := AMQP.Attributes(map[string]string{"cloudEvents:id": "x", "CloudEvents_Type": "t", "cloudEvents_": "empty name"}); !maps.Equal(got, map[string]string{"id": "x", "type": "t"}) {
		t.Errorf("AMQP attributes %v", got)
	}
	if got := Kafka.Attributes(map[string]string{"ce_id": "a%20b"}); got["id"] != "a%20b" {
		t.Errorf("Kafka values are not percent-decoded: got %q", got["id"])
	}
	if got := HTTP.Attributes(map[string]string{"Content-Type": "application/json", "traceparent": "00-x"}); got != nil {
		t.Errorf("no ce- header: attributes %v, want nil", got)
	}
	attrs := map[string]string{"id": "x", "partitionkey": "k"}
	for name, want := range map[string]bool{"ce-id": true, "CE_ID": true, "cloudEvents_partitionkey": true, "cloudevents:id": true,
		"ce-type": false, "id": false, "x-ce-id": false, "traceparent": false} {
		if IsCopy(name, attrs) != want {
			t.Errorf("IsCopy(%q) = %v, want %v", name, !want, want)
		}
	}
}

// TestHeadersCarryTheCloudEvent: whatever the event (with or without a key, a trace context, a
// content type), the headers of every binding carry exactly the attributes of ev.CloudEvent() (the
// default content type applied; AMQP's datacontenttype is the message's property, not a header).
func TestHeadersCarryTheCloudEvent(t *testing.T) {
	t.Parallel()
	full := event()
	bare := &outbox.Event{ID: "0190a1b2-0000-7000-8000-000000000002", Topic: "t", Kind: "k", Source: "/s", CreatedAt: time.Unix(0, 1)}
	stateOnly := event()
	delete(stateOnly.Headers, "traceparent") // a tracestate without a traceparent is not part of the envelope
	for _, ev := range []*outbox.Event{full, bare, stateOnly} {
		want := ev.CloudEvent()
		want[AttrDataContentType] = ContentType(ev)
		for _, b := range bindings {
			h := map[string]string{}
			for _, hd := range b.Headers(ev) {
				h[hd.Name] = hd.Value
			}
			got := b.Attributes(h)
			w := maps.Clone(want)
			if b.NoContentType {
				delete(w, AttrDataContentType)
			}
			if !maps.Equal(got, w) {
				t.Errorf("%s binding, event %s: attributes %v, want %v", b.Prefix, ev.ID, got, w)
			}
		}
	}
}
