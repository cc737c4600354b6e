package envelope

import (
	"testing"
	"time"

	"github.com/txinbox/txinbox/outbox"
)

// benchEvent is an event as a relay hands it over: id, source, kind, time, content type, an ordering
// key and a trace context.
func benchEvent() *outbox.Event {
	return &outbox.Event{
		ID: "0190f1c2-7a4b-7cde-8f01-23456789abcd", Topic: "ledger.accounts", Key: "account-42",
		Kind: "AccountCredited", Source: "/ledger", ContentType: "application/json",
		CreatedAt: time.Date(2026, 11, 29, 9, 0, 0, 123456789, time.UTC),
		Headers: map[string]string{
			"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
			"x-tenant":    "acme",
		},
		Payload: []byte(`{"account":42,"amount":100}`),
	}
}

// BenchmarkHeaders is the cost of an event's headers in each binding: once per event sent.
func BenchmarkHeaders(b *testing.B) {
	ev := benchEvent()
	for _, c := range []struct {
		name string
		b    Binding
	}{{"NATS", NATS}, {"AMQP", AMQP}, {"Kafka", Kafka}, {"HTTP", HTTP}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = c.b.Headers(ev, Header{Name: "Nats-Msg-Id", Value: ev.ID})
			}
		})
	}
}
