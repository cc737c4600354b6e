package adapters_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/adapters"
	"github.com/txinbox/txinbox/adapters/internal/adaptertest"
	"github.com/txinbox/txinbox/internal/limits"
	"github.com/txinbox/txinbox/seen"
)

func rec(id, kind, body string, headers map[string]string) *adapters.Record {
	return &adapters.Record{Source: "q", Offset: -1, MessageID: id, Type: kind, Body: []byte(body), Headers: headers}
}

// TestSinkStore stores one batch that holds a new message, a repeat, a conflict, a payload PostgreSQL
// jsonb cannot hold (a lone surrogate escape: refused by the inbox's validation before anything is
// sent), an oversized body and an invalid header: all in one transaction, each with the right outcome.
func TestSinkStore(t *testing.T) {
	t.Parallel()
	db := adaptertest.NewDB(t)
	s, err := adapters.NewSink(adapters.SinkConfig{Store: txinbox.Store{DB: db.Pool, Schema: db.Schema}, Consumer: "ledger", MaxPayloadBytes: 64,
		Key: adapters.MessageID(), OrderingKey: adapters.Header("account")})
	if err != nil {
		t.Fatal(err)
	}
	big := `{"pad": "` + strings.Repeat("x", 100) + `"}`
	res, err := s.Store(context.Background(), []*adapters.Record{
		rec("a", "credit", `{"n": 1}`, map[string]string{"account": "acc-7", "bad\x01": "v", "traceparent": "00-ab"}),
		rec("a", "credit", `{"n":1}`, nil),
		rec("a", "credit", `{"n": 2}`, nil),
		rec("surrogate", "credit", `{"s": "\ud800"}`, nil),
		rec("big", "credit", big, nil),
		rec("b", "credit", `{"n": 3}`, nil),
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := (adapters.BatchResult{Inserted: 2, Duplicates: 1, Conflicts: 1, Undecodable: 2}); res != want {
		t.Errorf("result %+v, want %+v", res, want)
	}
	if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE key = 'a' AND ordering_key = 'acc-7'
		AND headers = '{"account": "acc-7", "traceparent": "00-ab"}'::jsonb AND payload = '{"n": 1}'`); got != 1 {
		t.Error("message a: wrong ordering key, headers or payload")
	}
	if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE key = 'surrogate' AND state = 'dead'
		AND raw = convert_to('{"s": "\ud800"}', 'UTF8') AND last_error LIKE '%PostgreSQL%'`); got != 1 {
		t.Error("the payload PostgreSQL rejects is not stored dead with its raw bytes")
	}
	if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE key = 'big' AND state = 'dead' AND length(raw) = 64
		AND last_error LIKE '%truncated from 111 to 64%'`); got != 1 {
		t.Error("the oversized body is not stored dead, truncated")
	}
	if st := s.Stats(); st.Batches != 1 || st.Records != 6 || st.Inserted != 2 || st.Undecodable != 2 || st.Conflicts != 1 {
		t.Errorf("stats %+v", st)
	}

	// The same batch again: everything is a duplicate, nothing is written.
	again, err := s.Store(context.Background(), []*adapters.Record{rec("a", "credit", `{"n": 1}`, nil), rec("big", "credit", big, nil)})
	if err != nil {
		t.Fatal(err)
	}
	if want := (adapters.BatchResult{Duplicates: 2}); again != want {
		t.Errorf("second store %+v, want %+v", again, want)
	}
	if n := db.Count(t, `SELECT count(*) FROM {schema}.inbox`); n != 4 {
		t.Errorf("%d rows, want 4", n)
	}
}

func TestSinkDatabaseDown(t *testing.T) {
	t.Parallel()
	s, err := adapters.NewSink(adapters.SinkConfig{Store: txinbox.Store{DB: adaptertest.DeadPool(t)}, Consumer: "ledger", Key: adapters.MessageID()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Store(context.Background(), []*adapters.Record{rec("a", "credit", `{}`, nil)}); err == nil {
		t.Fatal("Store succeeded without a database")
	}
	if st := s.Stats(); st.Failures != 1 || st.Batches != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestNewSinkRejectsBadConfig(t *testing.T) {
	t.Parallel()
	db := adaptertest.DeadPool(t)
	for _, cfg := range []adapters.SinkConfig{
		{Consumer: "c", Key: adapters.MessageID()},
		{Store: txinbox.Store{DB: db}, Key: adapters.MessageID()},
		{Store: txinbox.Store{DB: db}, Consumer: "bad consumer", Key: adapters.MessageID()},
		{Store: txinbox.Store{DB: db}, Consumer: "c"},
		{Store: txinbox.Store{DB: db}, Consumer: "c", Key: adapters.MessageID(), DefaultKind: "bad kind"},
		{Store: txinbox.Store{DB: db, Schema: "bad-schema"}, Consumer: "c", Key: adapters.MessageID()},
	} {
		_, err := adapters.NewSink(cfg)
		var ce *txinbox.ConfigError
		if !errors.As(err, &ce) || !errors.Is(err, txinbox.ErrInvalidConfig) {
			t.Errorf("NewSink(%+v): %v, want a *txinbox.ConfigError", cfg, err)
		}
	}
}

// TestSinkHeadersOverTotalBound: a delivery whose headers are each valid but together pass
// limits.HeadersBytes (a broker configured for very large headers) is stored, not refused batch
// after batch: the headers are kept in name order up to the bound, the same ones on every redelivery.
func TestSinkHeadersOverTotalBound(t *testing.T) {
	t.Parallel()
	db := adaptertest.NewDB(t)
	s, err := adapters.NewSink(adapters.SinkConfig{Store: txinbox.Store{DB: db.Pool, Schema: db.Schema}, Consumer: "ledger", Key: adapters.MessageID()})
	if err != nil {
		t.Fatal(err)
	}
	headers := func() map[string]string {
		h := map[string]string{}
		for i := range 2 * limits.HeadersBytes / limits.HeaderValueBytes {
			h[fmt.Sprintf("h%04d", i)] = strings.Repeat("v", limits.HeaderValueBytes)
		}
		return h
	}
	for range 2 { // a redelivery keeps the same headers: a duplicate
		if _, err := s.Store(context.Background(), []*adapters.Record{rec("m", "credit", `{"n": 1}`, headers())}); err != nil {
			t.Fatal(err)
		}
	}
	kept := limits.HeadersBytes / (len("h0000") + limits.HeaderValueBytes)
	if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox, jsonb_object_keys(headers) k WHERE key = 'm' AND state = 'pending'`); got != int64(kept) {
		t.Errorf("%d headers kept, want %d", got, kept)
	}
	if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE key = 'm' AND headers ? $1 AND NOT headers ? $2`,
		fmt.Sprintf("h%04d", kept-1), fmt.Sprintf("h%04d", kept)); got != 1 {
		t.Error("the headers kept are not the first ones in name order")
	}
	if st := s.Stats(); st.Inserted != 1 || st.Duplicates != 1 {
		t.Errorf("stats %+v, want 1 inserted and 1 duplicate", st)
	}
}

// seenCount is a Store's Tracer counting seen-key cache hits and fallbacks (txinbox.OpSeenGet).
type seenCount struct{ hits, fallbacks atomic.Int64 }

func (o *seenCount) TraceStart(ctx context.Context, _ txinbox.TraceStart) context.Context { return ctx }

func (o *seenCount) TraceEnd(_ context.Context, d txinbox.TraceEnd) {
	if d.Op != txinbox.OpSeenGet {
		return
	}
	for _, r := range d.Results {
		switch r {
		case "hit":
			o.hits.Add(1)
		case "fallback":
			o.fallbacks.Add(1)
		}
	}
}

// TestSinkSeenCache: a sink with a seen-key cache caches a batch's keys once it committed, not when
// its transaction rolled back, and counts the same duplicates and conflicts as without a cache.
func TestSinkSeenCache(t *testing.T) {
	t.Parallel()
	db := adaptertest.NewDB(t)
	cache, err := seen.NewLRU(seen.LRUConfig{})
	if err != nil {
		t.Fatal(err)
	}
	o := &seenCount{}
	s, err := adapters.NewSink(adapters.SinkConfig{Store: txinbox.Store{DB: db.Pool, Schema: db.Schema, Tracer: o, SeenCache: cache},
		Consumer: "ledger", Key: adapters.MessageID()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	batch := func() []*adapters.Record {
		return []*adapters.Record{rec("a", "credit", `{"n": 1}`, nil), rec("a", "credit", `{"n": 1}`, nil), rec("b", "credit", `{"n": 2}`, nil)}
	}
	// A batch whose transaction fails (its context ends before the commit) leaves nothing cached.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Store(cctx, batch()); err == nil {
		t.Fatal("Store succeeded with a cancelled context")
	}
	if cache.Len() != 0 {
		t.Fatalf("%d keys cached by a failed batch", cache.Len())
	}
	if res, err := s.Store(ctx, batch()); err != nil || res != (adapters.BatchResult{Inserted: 2, Duplicates: 1}) {
		t.Fatalf("first store: %+v %v", res, err)
	}
	if cache.Len() != 2 {
		t.Fatalf("%d keys cached after the commit, want 2", cache.Len())
	}
	// a is sent to the database with its altered copy; b is answered by the cache.
	res, err := s.Store(ctx, append(batch(), rec("a", "credit", `{"n": 9}`, nil)))
	if err != nil || res != (adapters.BatchResult{Duplicates: 3, Conflicts: 1}) {
		t.Fatalf("redelivery: %+v %v", res, err)
	}
	if o.hits.Load() != 1 {
		t.Errorf("%d hits, want 1", o.hits.Load())
	}
	if n := db.Count(t, `SELECT count(*) FROM {schema}.inbox`); n != 2 {
		t.Errorf("%d rows, want 2", n)
	}
}

// TestSinkCommitFails makes the COMMIT of the Sink's transaction fail (a deferred constraint trigger
// raises at commit, after every statement succeeded): Store must return the commit's error, so that
// the adapter does not acknowledge the batch; nothing is stored, counted as stored or cached; and
// once commits succeed again, the same batch is stored as new messages.
func TestSinkCommitFails(t *testing.T) {
	t.Parallel()
	db := adaptertest.NewDB(t)
	allow := adaptertest.RefuseCommits(t, db)
	cache, err := seen.NewLRU(seen.LRUConfig{})
	if err != nil {
		t.Fatal(err)
	}
	st := db.Store()
	st.SeenCache = cache
	s, err := adapters.NewSink(adapters.SinkConfig{Store: st, Consumer: "ledger", Key: adapters.MessageID()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	batch := func() []*adapters.Record {
		return []*adapters.Record{rec("a", "credit", `{"n": 1}`, nil), rec("b", "credit", `{"n": 2}`, nil), rec("c", "credit", `{"n": `, nil)}
	}
	res, err := s.Store(ctx, batch())
	if err == nil {
		t.Fatalf("Store returned %+v and no error, though its commit failed: the adapter would acknowledge a lost batch", res)
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || !strings.Contains(pe.Message, adaptertest.RefusedCommit) || !strings.Contains(err.Error(), "txinbox/adapters: commit: ") {
		t.Fatalf("Store: %v, want the commit's error (%s)", err, adaptertest.RefusedCommit)
	}
	if res != (adapters.BatchResult{}) {
		t.Errorf("result %+v of a failed store, want none", res)
	}
	if n := db.Count(t, `SELECT count(*) FROM {schema}.inbox`); n != 0 {
		t.Errorf("%d rows stored by a batch whose commit failed", n)
	}
	if n := db.Count(t, `SELECT count(*) FROM {schema}.inbox_queue`); n != 0 {
		t.Errorf("%d queue rows left by a batch whose commit failed", n)
	}
	if cache.Len() != 0 {
		t.Errorf("%d keys cached by a batch whose commit failed", cache.Len())
	}
	if st := s.Stats(); st != (adapters.Stats{Failures: 1}) {
		t.Errorf("stats %+v, want one failure and nothing else", st)
	}

	allow()
	res, err = s.Store(ctx, batch())
	if err != nil {
		t.Fatal(err)
	}
	if want := (adapters.BatchResult{Inserted: 2, Undecodable: 1}); res != want {
		t.Errorf("after commits succeed again: %+v, want %+v (nothing of the failed batch was kept)", res, want)
	}
	if n := db.Count(t, `SELECT count(*) FROM {schema}.inbox`); n != 3 {
		t.Errorf("%d rows, want 3", n)
	}
}

// TestSinkReadsTheEnvelope: a record that is a CloudEvent (a specversion attribute) is stored with its
// id attribute as key (the broker packages' default key starts with CloudEventID), its type as kind
// (before the AMQP type and the x-kind header), its partitionkey as ordering key, and its headers
// without the broker's prefixed copies of the attributes but with each attribute under its ce- name
// and the trace context as traceparent and tracestate: the protocol's headers (in any case) if it has
// them, else the attributes. A record with attributes but no specversion is no CloudEvent and is
// stored as before; an explicit Key or OrderingKey wins over the envelope.
func TestSinkReadsTheEnvelope(t *testing.T) {
	t.Parallel()
	db := adaptertest.NewDB(t)
	store := txinbox.Store{DB: db.Pool, Schema: db.Schema}
	const tp, tpAttr = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "00-0af7651916cd43dd8448eb211c80319c-b9c7c989f97918e1-01"
	attrs := func(id string) map[string]string {
		return map[string]string{"specversion": "1.0", "id": id, "source": "/shop", "type": "order.paid", "time": "2026-01-02T03:04:05Z",
			"datacontenttype": "application/json", "partitionkey": "order 7", "traceparent": tpAttr, "tracestate": "attr=1", "ext": "x"}
	}
	protocol := rec("broker-id-1", "amqp.type", `{"n": 1}`, map[string]string{
		"ce_id": "e1", "cloudEvents_type": "order.paid", "CE-SOURCE": "/shop", "ce-partitionkey": "order%207",
		"Traceparent": tp, "TraceState": "proto=1", "x-kind": "header.kind", "x-tenant": "t1"})
	protocol.CloudEvent = attrs("e1")
	fallback := rec("broker-id-2", "", `{"n": 2}`, map[string]string{"x-tenant": "t2"})
	fallback.CloudEvent = attrs("e2")
	notCE := rec("broker-id-3", "", `{"n": 3}`, map[string]string{"x-kind": "header.kind", "ce-type": "order.paid", "Traceparent": tp})
	notCE.CloudEvent = map[string]string{"type": "order.paid", "id": "e3"}

	s, err := adapters.NewSink(adapters.SinkConfig{Store: store, Consumer: "env", Key: adapters.FirstOf(adapters.CloudEventID(), adapters.MessageID())})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Store(context.Background(), []*adapters.Record{protocol, fallback, notCE}); err != nil {
		t.Fatal(err)
	}
	ce := func(id string) map[string]string {
		return map[string]string{"ce-specversion": "1.0", "ce-id": id, "ce-source": "/shop", "ce-type": "order.paid",
			"ce-time": "2026-01-02T03:04:05Z", "ce-datacontenttype": "application/json", "ce-partitionkey": "order 7", "ce-ext": "x"}
	}
	with := func(a, b map[string]string) map[string]string {
		for k, v := range b {
			a[k] = v
		}
		return a
	}
	for key, want := range map[string]struct {
		kind, ordering string
		headers        map[string]string
	}{
		"e1":          {"order.paid", "order 7", with(ce("e1"), map[string]string{"traceparent": tp, "tracestate": "proto=1", "x-kind": "header.kind", "x-tenant": "t1"})},
		"e2":          {"order.paid", "order 7", with(ce("e2"), map[string]string{"traceparent": tpAttr, "tracestate": "attr=1", "x-tenant": "t2"})},
		"broker-id-3": {"header.kind", "", map[string]string{"x-kind": "header.kind", "ce-type": "order.paid", "Traceparent": tp}},
	} {
		var kind, ordering string
		var headers map[string]string
		err := db.Pool.QueryRow(context.Background(), db.SQL(`SELECT kind, coalesce(ordering_key, ''), headers FROM {schema}.inbox
			WHERE consumer = 'env' AND key = $1 AND state = 'pending'`), key).Scan(&kind, &ordering, &headers)
		if err != nil {
			t.Errorf("message %s: %v", key, err)
			continue
		}
		if kind != want.kind || ordering != want.ordering || fmt.Sprint(headers) != fmt.Sprint(want.headers) {
			t.Errorf("message %s stored with kind %q, ordering key %q, headers\n%v\nwant %q, %q,\n%v", key, kind, ordering, headers, want.kind, want.ordering, want.headers)
		}
	}

	explicit, err := adapters.NewSink(adapters.SinkConfig{Store: store, Consumer: "explicit", Key: adapters.MessageID(), OrderingKey: adapters.Header("x-tenant")})
	if err != nil {
		t.Fatal(err)
	}
	r := rec("broker-id-4", "", `{"n": 4}`, map[string]string{"x-tenant": "t4"})
	r.CloudEvent = attrs("e4")
	if _, err := explicit.Store(context.Background(), []*adapters.Record{r}); err != nil {
		t.Fatal(err)
	}
	if n := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE consumer = 'explicit' AND key = 'broker-id-4' AND kind = 'order.paid'
		AND ordering_key = 't4'`); n != 1 {
		t.Error("with an explicit Key and OrderingKey, the envelope's id and partitionkey won")
	}
}
