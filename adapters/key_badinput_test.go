package adapters_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/adapters"
	"github.com/txinbox/txinbox/adapters/internal/adaptertest"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/internal/limits"
)

// Bad keys from each source a key strategy reads (message id, header, Kafka record key), through
// Sink.Store: as documented on KeyFunc, the record is stored dead with its raw bytes, keyed by
// inbox.ContentKey(kind, raw), with the reason as its last error; the valid record of the same batch
// is stored; and the rows stored before are unchanged.
func TestSinkBadKeys(t *testing.T) {
	t.Parallel()
	db := adaptertest.NewDB(t)
	ctx := context.Background()
	sinks := map[string]*adapters.Sink{}
	for name, fn := range map[string]adapters.KeyFunc{
		"message id": adapters.MessageID(), "header": adapters.Header("x-idempotency-key"), "record key": adapters.RecordKey(),
	} {
		s, err := adapters.NewSink(adapters.SinkConfig{Store: txinbox.Store{DB: db.Pool, Schema: db.Schema}, Consumer: "ledger", Key: fn})
		if err != nil {
			t.Fatal(err)
		}
		sinks[name] = s
	}
	// Rows stored before, through each source.
	for name, s := range sinks {
		if res, err := s.Store(ctx, []*adapters.Record{record(name, "stored-"+strings.ReplaceAll(name, " ", "-"), `{"n": 0}`)}); err != nil || res.Inserted != 1 {
			t.Fatalf("%s: first store: %+v, %v", name, res, err)
		}
	}
	checksum := func() string {
		var s string
		if err := db.Pool.QueryRow(ctx, db.SQL(`SELECT count(*) || ':' || md5(string_agg(m::text, '|' ORDER BY m.id))
			FROM {schema}.inbox m WHERE key LIKE 'stored-%'`)).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := checksum()

	bad := []struct{ name, key, reason string }{
		{"over-long", strings.Repeat("k", limits.KeyBytes+1), "no valid idempotency key"},
		{"over-long multibyte", strings.Repeat("é", limits.KeyBytes/2+1), "no valid idempotency key"},
		{"NUL", "a\x00b", "no valid idempotency key"},
		{"NUL alone", "\x00", "no valid idempotency key"},
		{"invalid UTF-8", "k\xff", "no valid idempotency key"},
		{"truncated UTF-8", "k\xe2\x82", "no valid idempotency key"},
		{"control character", "a\nb", "no valid idempotency key"},
		{"empty", "", "no valid idempotency key"},
	}
	n := 0
	for source, s := range sinks {
		for _, c := range bad {
			n++
			name := source + ", " + c.name
			body := fmt.Sprintf(`{"case": %d}`, n) // distinct bytes: distinct content keys
			good := record(source, fmt.Sprintf("good-%d", n), `{"n": 1}`)
			res, err := s.Store(ctx, []*adapters.Record{good, record(source, c.key, body)})
			if err != nil {
				t.Fatalf("%s: Store: %v", name, err)
			}
			if want := (adapters.BatchResult{Inserted: 1, Undecodable: 1}); res != want {
				t.Errorf("%s: %+v, want %+v", name, res, want)
			}
			var state, kind, lastError string
			var raw []byte
			err = db.Pool.QueryRow(ctx, db.SQL(`SELECT state, kind, raw, last_error FROM {schema}.inbox WHERE consumer = 'ledger' AND key = $1`),
				inbox.ContentKey("credit", []byte(body))).Scan(&state, &kind, &raw, &lastError)
			if err != nil {
				t.Fatalf("%s: the dead row keyed by the content hash: %v", name, err)
			}
			if state != "dead" || kind != "credit" || string(raw) != body || !strings.Contains(lastError, c.reason) {
				t.Errorf("%s: stored %s %s %q %q", name, state, kind, raw, lastError)
			}
			// Redelivered: a duplicate of the dead row, nothing written.
			res, err = s.Store(ctx, []*adapters.Record{record(source, c.key, body)})
			if err != nil || res != (adapters.BatchResult{Duplicates: 1}) {
				t.Errorf("%s: redelivery: %+v, %v", name, res, err)
			}
			if after := checksum(); after != before {
				t.Fatalf("%s: rows stored before changed: %s -> %s", name, before, after)
			}
		}
		// The longest valid key is stored as it is.
		long := strings.Repeat("L", limits.KeyBytes-len(source)) + source
		long = long[len(long)-limits.KeyBytes:]
		if res, err := s.Store(ctx, []*adapters.Record{record(source, long, `{"n": 2}`)}); err != nil || res.Inserted != 1 {
			t.Errorf("%s: key of %d bytes: %+v, %v", source, limits.KeyBytes, res, err)
		}
	}
	if n := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE state = 'dead'`); n != int64(len(bad)*len(sinks)) {
		t.Errorf("%d dead rows, want %d", n, len(bad)*len(sinks))
	}
}

// record returns an AMQP-like record (type "credit") whose key, for the strategy named source, is key.
func record(source, key, body string) *adapters.Record {
	r := &adapters.Record{Source: "q", Offset: -1, Type: "credit", Body: []byte(body), Headers: map[string]string{"trace": "t"}}
	switch source {
	case "message id":
		r.MessageID = key
	case "header":
		r.Headers["x-idempotency-key"] = key
	case "record key":
		if key != "" {
			r.RecordKey = []byte(key)
		}
	default:
		panic(source)
	}
	return r
}
