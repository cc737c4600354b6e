package adapters_test

import (
	"errors"
	"testing"

	"github.com/txinbox/txinbox/adapters"
	"github.com/txinbox/txinbox/inbox"
)

func TestKeyStrategies(t *testing.T) {
	t.Parallel()
	r := &adapters.Record{Source: "orders:eu", Partition: 2, Offset: 41, MessageID: "m-1", RecordKey: []byte("rk"),
		Kind: "OrderPaid", Headers: map[string]string{"X-Idempotency-Key": "h-1"}, Body: []byte(`{}`)}
	for _, tc := range []struct {
		name string
		fn   adapters.KeyFunc
		want string
	}{
		{"message id", adapters.MessageID(), "m-1"},
		{"header, any case", adapters.Header("x-idempotency-key"), "h-1"},
		{"record key", adapters.RecordKey(), "rk"},
		{"coordinates", adapters.Coordinates(), inbox.BrokerKey("orders:eu", 2, 41)},
		{"content hash", adapters.ContentHash(), inbox.ContentKey("OrderPaid", []byte(`{}`))},
		{"first of", adapters.FirstOf(adapters.Header("nope"), adapters.RecordKey()), "rk"},
	} {
		got, err := tc.fn(r)
		if err != nil || got != tc.want {
			t.Errorf("%s: got %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
	if got := inbox.BrokerKey("orders:eu", 2, 41); got != "orders%3Aeu:2:41" {
		t.Errorf("BrokerKey escapes: %q", got)
	}
	empty := &adapters.Record{Offset: -1}
	for name, fn := range map[string]adapters.KeyFunc{
		"message id": adapters.MessageID(), "header": adapters.Header("x"), "record key": adapters.RecordKey(),
		"coordinates": adapters.Coordinates(), "first of": adapters.FirstOf(adapters.MessageID(), adapters.RecordKey()),
		"first of nothing": adapters.FirstOf(),
	} {
		if k, err := fn(empty); !errors.Is(err, adapters.ErrNoKey) {
			t.Errorf("%s on an empty record: %q, %v; want ErrNoKey", name, k, err)
		}
	}
}
