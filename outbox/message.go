package outbox

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/internal/limits"
	"github.com/txinbox/txinbox/internal/textcheck"
)

// Message is one event to publish.
type Message struct {
	// Topic says where the event goes (a Kafka topic, a NATS subject, an AMQP routing key, a webhook
	// event type): 1 to 255 bytes of UTF-8 without control characters. Adapters may
	// refuse topics their broker cannot take.
	Topic string
	// Key orders events: the events of one key are published one at a time, in the order they were
	// published (see the package documentation), across topics. Empty: no order. At most
	// 512 bytes of UTF-8 without control characters.
	Key string
	// Kind is the event's type: what happened ("order.created"). It is sent as the CloudEvents type,
	// and a txinbox consumer takes it as the inbox message's kind, which picks its handler. 1 to 128
	// letters, digits or _.:/- starting with a letter or digit ([txinbox.ValidateName]). Default: the
	// Topic, which must then be a valid kind.
	Kind string
	// ContentType is the payload's media type, sent as the CloudEvents datacontenttype (and the
	// broker's content type). The payload must be JSON whatever it says. At most 255 bytes. Default:
	// [DefaultContentType] ("application/json").
	ContentType string
	// Payload is the event's body, a JSON document of at most Config.MaxPayloadBytes bytes, valid
	// UTF-8. It is stored and published byte for byte.
	Payload []byte
	// Headers are stored with the event and sent with it, as the broker's headers. With a
	// Store.Tracer, Publish adds the caller's trace context (traceparent, tracestate) unless they
	// hold a traceparent already. At most 64 of them; names of 1 to 256 bytes, values of at most
	// 8192 bytes, all names and values together at most 64 KiB, each UTF-8 without control
	// characters. A header named as one of the
	// envelope's (see [Event.CloudEvent]) is replaced by the envelope's when the event is sent.
	Headers map[string]string
	// NotBefore delays the event's first attempt until that time (on the database clock); zero means
	// at once. A delayed event keeps its place in its key: the later events of the key wait behind
	// it. Its year must be between 1 and 9999.
	NotBefore time.Time
}

// kind returns the message's kind, its default applied.
func (m *Message) kind() string {
	if m.Kind == "" {
		return m.Topic
	}
	return m.Kind
}

// DefaultContentType is Message.ContentType when it is empty.
const DefaultContentType = "application/json"

// Limits of a [Message] and of a Publish call, documented on the fields and the call they bound.
const (
	defaultMaxPayloadBytes = 1 << 20  // Config.MaxPayloadBytes
	maxHeaders             = 64       // Message.Headers
	maxHeaderNameBytes     = 256      // Message.Headers
	maxHeaderValueBytes    = 8192     // Message.Headers
	maxHeadersBytes        = 64 << 10 // Message.Headers: names and values together
	maxContentTypeBytes    = 255      // Message.ContentType
	maxMessages            = 1000     // Client.Publish
	maxCallBytes           = 64 << 20 // Client.Publish: payloads and headers together
)

// validate checks m, the i-th message of a call.
func validate(i int, m *Message, maxPayload int) error {
	bad := func(field string, err error) error {
		return &txinbox.ValidationError{Index: i, Field: field, Reason: err.Error()}
	}
	if err := textcheck.Check(m.Topic, limits.TopicBytes, false); err != nil {
		return bad("topic", err)
	}
	if err := textcheck.Check(m.Key, limits.KeyBytes, true); err != nil {
		return bad("key", err)
	}
	if m.Kind != "" {
		if err := txinbox.ValidateName(m.Kind); err != nil {
			return bad("kind", err)
		}
	} else if err := txinbox.ValidateName(m.Topic); err != nil {
		return bad("kind", fmt.Errorf("is empty, and its default, the topic, is not a valid kind: %w; set Kind", err))
	}
	if err := validateContentType(m.ContentType); err != nil {
		return bad("content_type", err)
	}
	if err := validatePayload(m.Payload, maxPayload); err != nil {
		return bad("payload", err)
	}
	if err := validateHeaders(m.Headers); err != nil {
		return bad("headers", err)
	}
	if !m.NotBefore.IsZero() && (m.NotBefore.Year() < 1 || m.NotBefore.Year() > 9999) {
		return bad("not_before", fmt.Errorf("year %d is not between 1 and 9999", m.NotBefore.Year()))
	}
	return nil
}

// validateContentType checks a media type (RFC 2045 syntax, parameters allowed); "" is the default.
func validateContentType(ct string) error {
	if ct == "" {
		return nil
	}
	if err := textcheck.Check(ct, maxContentTypeBytes, false); err != nil {
		return err
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && (strings.Count(mt, "/") != 1 || strings.HasPrefix(mt, "/") || strings.HasSuffix(mt, "/")) {
		err = errors.New("want type/subtype")
	}
	if err != nil {
		return fmt.Errorf("%q is not a media type: %v", truncate(ct), err)
	}
	return nil
}

func validatePayload(p []byte, maxBytes int) error {
	switch {
	case len(p) == 0:
		return errors.New("must not be empty (use null, {} or another JSON value)")
	case len(p) > maxBytes:
		return fmt.Errorf("is %d bytes, more than the limit of %d", len(p), maxBytes)
	case !utf8.Valid(p):
		return errors.New("is not valid UTF-8")
	case !json.Valid(p):
		return errors.New("is not valid JSON")
	}
	return nil
}

func validateHeaders(h map[string]string) error {
	if len(h) > maxHeaders {
		return fmt.Errorf("%d headers, more than the limit of %d", len(h), maxHeaders)
	}
	total := 0
	for k, v := range h {
		if err := textcheck.Check(k, maxHeaderNameBytes, false); err != nil {
			return fmt.Errorf("name %q %v", truncate(k), err)
		}
		if err := textcheck.Check(v, maxHeaderValueBytes, true); err != nil {
			return fmt.Errorf("%q value %v", truncate(k), err)
		}
		total += len(k) + len(v)
	}
	if total > maxHeadersBytes {
		return fmt.Errorf("%d bytes of names and values, more than the limit of %d", total, maxHeadersBytes)
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// newEventID returns a new event id: a UUID of version 7 (RFC 9562) in its 36-character text form,
// its first 48 bits the Unix time in milliseconds at t, the other 74 free bits random.
func newEventID(t time.Time) string {
	var b [16]byte
	_, _ = rand.Read(b[6:]) // crypto/rand.Read never fails
	ms := uint64(t.UnixMilli())
	for i := range 6 {
		b[i] = byte(ms >> (40 - 8*i))
	}
	b[6] = 0x70 | b[6]&0x0f // version 7
	b[8] = 0x80 | b[8]&0x3f // variant 10
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:36], b[10:16])
	return string(s[:])
}
