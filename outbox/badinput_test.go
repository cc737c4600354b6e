package outbox_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/internal/limits"
	"github.com/txinbox/txinbox/outbox"
)

// Each kind of bad input to Publish gets its typed error before any statement is sent: nothing is
// written, and the caller's transaction goes on (a later statement and the commit succeed).
func TestBadInputWritesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	small, err := outbox.New(e.Store(), outbox.Config{MaxPayloadBytes: 64})
	if err != nil {
		t.Fatal(err)
	}
	ok := msg("ok", "k", 1)
	with := func(mod func(m *outbox.Message)) []outbox.Message {
		m := msg("topic", "key", 1)
		mod(&m)
		return []outbox.Message{m}
	}
	// The limits documented on Message, Config.MaxPayloadBytes and Client.Publish.
	const (
		maxHeaders, maxHeaderNameBytes, maxHeaderValueBytes, maxHeadersBytes = 64, 256, 8192, 64 << 10
		defaultMaxPayloadBytes, maxCallBytes, maxMessages                    = 1 << 20, 64 << 20, 1000
	)
	manyHeaders := map[string]string{}
	for i := range maxHeaders + 1 {
		manyHeaders[strings.Repeat("h", i+1)] = "v"
	}
	bigHeaders := map[string]string{}
	for i := range maxHeadersBytes/maxHeaderValueBytes + 1 {
		bigHeaders[strings.Repeat("h", i+1)] = strings.Repeat("v", maxHeaderValueBytes)
	}
	mib := append(append([]byte(`"`), bytes.Repeat([]byte("x"), defaultMaxPayloadBytes-2)...), '"')
	var tooBig []outbox.Message // within each limit, beyond maxCallBytes together
	for range maxCallBytes/defaultMaxPayloadBytes + 1 {
		tooBig = append(tooBig, outbox.Message{Topic: "t", Payload: mib})
	}
	tooMany := make([]outbox.Message, maxMessages+1)
	for i := range tooMany {
		tooMany[i] = ok
	}

	cases := []struct {
		name   string
		client *outbox.Client
		msgs   []outbox.Message
		index  int
		field  string // a *ValidationError of this field; "" for a *txinbox.ArgumentError
		arg    string // its Name
	}{
		{name: "empty topic", msgs: with(func(m *outbox.Message) { m.Topic = "" }), field: "topic"},
		{name: "topic with a newline", msgs: with(func(m *outbox.Message) { m.Topic = "a\nb" }), field: "topic"},
		{name: "topic with NUL", msgs: with(func(m *outbox.Message) { m.Topic = "a\x00b" }), field: "topic"},
		{name: "topic with DEL", msgs: with(func(m *outbox.Message) { m.Topic = "a\x7fb" }), field: "topic"},
		{name: "topic not UTF-8", msgs: with(func(m *outbox.Message) { m.Topic = "a\xffb" }), field: "topic"},
		{name: "topic too long", msgs: with(func(m *outbox.Message) { m.Topic = strings.Repeat("t", limits.TopicBytes+1) }), field: "topic"},
		{name: "key too long", msgs: with(func(m *outbox.Message) { m.Key = strings.Repeat("k", limits.KeyBytes+1) }), field: "key"},
		{name: "key with a tab", msgs: with(func(m *outbox.Message) { m.Key = "a\tb" }), field: "key"},
		{name: "key not UTF-8", msgs: with(func(m *outbox.Message) { m.Key = "\xc3" }), field: "key"},
		{name: "kind with a space", msgs: with(func(m *outbox.Message) { m.Kind = "order created" }), field: "kind"},
		{name: "kind too long", msgs: with(func(m *outbox.Message) { m.Kind = strings.Repeat("k", 129) }), field: "kind"},
		{name: "no kind, topic not a kind", msgs: with(func(m *outbox.Message) { m.Topic = "orders created" }), field: "kind"},
		{name: "content type not a media type", msgs: with(func(m *outbox.Message) { m.ContentType = "json" }), field: "content_type"},
		{name: "content type with a newline", msgs: with(func(m *outbox.Message) { m.ContentType = "application/json\n" }), field: "content_type"},
		{name: "empty payload", msgs: with(func(m *outbox.Message) { m.Payload = nil }), field: "payload"},
		{name: "payload not JSON", msgs: with(func(m *outbox.Message) { m.Payload = []byte(`{"a":`) }), field: "payload"},
		{name: "payload of two values", msgs: with(func(m *outbox.Message) { m.Payload = []byte(`{} {}`) }), field: "payload"},
		{name: "payload not UTF-8", msgs: with(func(m *outbox.Message) { m.Payload = []byte("\"\xff\"") }), field: "payload"},
		{name: "payload too large", client: small, msgs: with(func(m *outbox.Message) { m.Payload = []byte(`"` + strings.Repeat("x", 64) + `"`) }), field: "payload"},
		{name: "too many headers", msgs: with(func(m *outbox.Message) { m.Headers = manyHeaders }), field: "headers"},
		{name: "empty header name", msgs: with(func(m *outbox.Message) { m.Headers = map[string]string{"": "v"} }), field: "headers"},
		{name: "header name too long", msgs: with(func(m *outbox.Message) {
			m.Headers = map[string]string{strings.Repeat("n", maxHeaderNameBytes+1): "v"}
		}), field: "headers"},
		{name: "header value too long", msgs: with(func(m *outbox.Message) {
			m.Headers = map[string]string{"n": strings.Repeat("v", maxHeaderValueBytes+1)}
		}), field: "headers"},
		{name: "header value with CR", msgs: with(func(m *outbox.Message) { m.Headers = map[string]string{"n": "a\rb"} }), field: "headers"},
		{name: "header name with NUL", msgs: with(func(m *outbox.Message) { m.Headers = map[string]string{"a\x00": "v"} }), field: "headers"},
		{name: "headers too large together", msgs: with(func(m *outbox.Message) { m.Headers = bigHeaders }), field: "headers"},
		{name: "not-before beyond year 9999", msgs: with(func(m *outbox.Message) { m.NotBefore = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) }), field: "not_before"},
		{name: "second message invalid", msgs: []outbox.Message{ok, {Topic: "t", Payload: []byte(`nope`)}}, index: 1, field: "payload"},
		{name: "too many messages", msgs: tooMany, arg: "msgs"},
		{name: "too many bytes together", msgs: tooBig, arg: "msgs"},
	}
	ctx := context.Background()
	for _, tc := range cases {
		c := tc.client
		if c == nil {
			c = e.client
		}
		err := pgx.BeginFunc(ctx, e.Pool, func(tx pgx.Tx) error {
			ids, err := c.Publish(ctx, tx, tc.msgs...)
			if ids != nil {
				t.Errorf("%s: ids %v returned with error %v", tc.name, ids, err)
			}
			switch tc.field {
			case "":
				var ae *txinbox.ArgumentError
				if !errors.As(err, &ae) || ae.Name != tc.arg || !errors.Is(err, txinbox.ErrInvalidArgument) {
					t.Errorf("%s: got %v, want a *txinbox.ArgumentError of %s", tc.name, err, tc.arg)
				}
			default:
				var ve *txinbox.ValidationError
				if !errors.As(err, &ve) || ve.Field != tc.field || ve.Index != tc.index || !errors.Is(err, txinbox.ErrInvalidMessage) {
					t.Errorf("%s: got %v, want a *txinbox.ValidationError of message %d, field %s", tc.name, err, tc.index, tc.field)
				}
			}
			_, err = tx.Exec(ctx, "SELECT 1") // the transaction is still usable
			return err
		})
		if err != nil {
			t.Errorf("%s: the caller's transaction failed after the rejected call: %v", tc.name, err)
		}
	}
	// No transaction at all.
	var ae *txinbox.ArgumentError
	if _, err := e.client.Publish(ctx, nil, ok); !errors.As(err, &ae) || ae.Name != "tx" {
		t.Errorf("nil tx: got %v, want a *txinbox.ArgumentError of tx", err)
	}
	if n := e.Count(t, `SELECT (SELECT count(*) FROM {schema}.outbox) + (SELECT count(*) FROM {schema}.outbox_queue)`); n != 0 {
		t.Fatalf("%d rows written by rejected calls", n)
	}
	// An empty call writes nothing either, and a valid one after all that works.
	if ids := e.publish(t); ids != nil {
		t.Errorf("empty call: ids %v", ids)
	}
	if ids := e.publish(t, ok); len(ids) != 1 || e.Count(t, `SELECT count(*) FROM {schema}.outbox_queue`) != 1 {
		t.Errorf("valid call after the rejected ones: ids %v", ids)
	}
}
