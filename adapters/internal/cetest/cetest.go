// Package cetest reads the messages of the outbox publishers as a CloudEvents receiver that is not
// txinbox's code does: with the CloudEvents SDK for Go (github.com/cloudevents/sdk-go/v2), through its
// protocol bindings for NATS JetStream, Kafka (sarama) and HTTP. The SDK has no binding for AMQP
// 0-9-1 (its amqp module is AMQP 1.0): [AMQP] maps the cloudEvents_ headers of a RabbitMQ message onto
// an event with the SDK's setters, as the AMQP binding says. Each function validates the event
// (event.Event.Validate) and returns its context attributes by name.
//
// Only tests import this package: the adapters' code does not depend on the SDK.
package cetest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/IBM/sarama"
	cesarama "github.com/cloudevents/sdk-go/protocol/kafka_sarama/v2"
	cejs "github.com/cloudevents/sdk-go/protocol/nats_jetstream/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/cloudevents/sdk-go/v2/types"
	"github.com/nats-io/nats.go"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kgo"
)

// NATS reads a NATS message with the SDK's NATS JetStream binding (cejs.NewMessage).
func NATS(m *nats.Msg) (map[string]string, error) {
	return read(cejs.NewMessage(m), m.Data)
}

// Kafka reads a Kafka record with the SDK's Kafka binding, through the sarama message it would have
// consumed (cesarama.NewMessageFromConsumerMessage).
func Kafka(r *kgo.Record) (map[string]string, error) {
	cm := &sarama.ConsumerMessage{Key: r.Key, Value: r.Value, Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp}
	for _, h := range r.Headers {
		cm.Headers = append(cm.Headers, &sarama.RecordHeader{Key: []byte(h.Key), Value: h.Value})
	}
	attrs, err := read(cesarama.NewMessageFromConsumerMessage(cm), r.Value)
	// The SDK's Kafka binding adds the record's coordinates as extensions of its own.
	for _, x := range []string{"kafkaoffset", "kafkapartition", "kafkatopic"} {
		delete(attrs, x)
	}
	return attrs, err
}

// HTTP reads a request's headers and body with the SDK's HTTP binding (cehttp.NewMessage, what
// cehttp.NewMessageFromHttpRequest reads).
func HTTP(h http.Header, body []byte) (map[string]string, error) {
	return read(cehttp.NewMessage(h, io.NopCloser(bytes.NewReader(body))), body)
}

// AMQP builds the event of a RabbitMQ message as the AMQP binding maps it, with the SDK's setters:
// each cloudEvents_ (or cloudEvents:) header is the attribute of its name, and the content-type
// property is datacontenttype. No SDK binding reads AMQP 0-9-1.
func AMQP(headers amqp.Table, contentType string, body []byte) (map[string]string, error) {
	attr := map[string]string{}
	for name, v := range headers {
		for _, p := range []string{"cloudEvents_", "cloudEvents:"} {
			if a, ok := strings.CutPrefix(name, p); ok {
				s, ok := v.(string)
				if !ok {
					return nil, fmt.Errorf("header %s is a %T, not a string", name, v)
				}
				attr[a] = s
			}
		}
	}
	if attr["specversion"] == "" {
		return nil, fmt.Errorf("no cloudEvents_specversion header (headers %v)", headers)
	}
	e := event.New(attr["specversion"])
	e.SetID(attr["id"])
	e.SetSource(attr["source"])
	e.SetType(attr["type"])
	if attr["time"] != "" {
		t, err := types.ParseTime(attr["time"])
		if err != nil {
			return nil, fmt.Errorf("cloudEvents_time: %w", err)
		}
		e.SetTime(t)
	}
	if err := e.SetData(contentType, body); err != nil {
		return nil, err
	}
	for name, v := range attr {
		switch name {
		case "specversion", "id", "source", "type", "time":
		default:
			e.SetExtension(name, v)
		}
	}
	return attributes(&e, body)
}

// read turns a binding's message into an event (binary mode), validates it and returns its
// attributes.
func read(m binding.Message, body []byte) (map[string]string, error) {
	if enc := m.ReadEncoding(); enc != binding.EncodingBinary {
		return nil, fmt.Errorf("the SDK reads the message in %v mode, want binary", enc)
	}
	e, err := binding.ToEvent(context.Background(), m)
	if err != nil {
		return nil, fmt.Errorf("binding.ToEvent: %w", err)
	}
	return attributes(e, body)
}

// attributes validates e, checks that its data is body, and returns its context attributes by name
// (time in RFC 3339 in UTC, as the publishers write it).
func attributes(e *event.Event, body []byte) (map[string]string, error) {
	if err := e.Validate(); err != nil {
		return nil, fmt.Errorf("event.Validate: %w", err)
	}
	if !bytes.Equal(e.Data(), body) {
		return nil, fmt.Errorf("the event's data is %q, want the body %q", e.Data(), body)
	}
	a := map[string]string{"specversion": e.SpecVersion(), "id": e.ID(), "source": e.Source(), "type": e.Type()}
	if !e.Time().IsZero() {
		a["time"] = e.Time().UTC().Format(time.RFC3339Nano)
	}
	if ct := e.DataContentType(); ct != "" {
		a["datacontenttype"] = ct
	}
	for name, v := range e.Extensions() {
		s, err := types.ToString(v)
		if err != nil {
			return nil, fmt.Errorf("extension %s: %w", name, err)
		}
		a[name] = s
	}
	return a, nil
}
