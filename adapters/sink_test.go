package adapters_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/adapters"
	"github.com/txinbox/txinbox/adapters/internal/adaptertest"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/internal/testkit/testdb"
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
	db := testdb.New(t)
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
// inbox.MaxHeadersBytes (a broker configured for very large headers) is stored, not refused batch
// after batch: the headers are kept in name order up to the bound, the same ones on every redelivery.
func TestSinkHeadersOverTotalBound(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	s, err := adapters.NewSink(adapters.SinkConfig{Store: txinbox.Store{DB: db.Pool, Schema: db.Schema}, Consumer: "ledger", Key: adapters.MessageID()})
	if err != nil {
		t.Fatal(err)
	}
	headers := func() map[string]string {
		h := map[string]string{}
		for i := range 2 * inbox.MaxHeadersBytes / inbox.MaxHeaderValueBytes {
			h[fmt.Sprintf("h%04d", i)] = strings.Repeat("v", inbox.MaxHeaderValueBytes)
		}
		return h
	}
	for range 2 { // a redelivery keeps the same headers: a duplicate
		if _, err := s.Store(context.Background(), []*adapters.Record{rec("m", "credit", `{"n": 1}`, headers())}); err != nil {
			t.Fatal(err)
		}
	}
	kept := inbox.MaxHeadersBytes / (len("h0000") + inbox.MaxHeaderValueBytes)
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

// seenCount is an inbox Observer counting seen-key cache hits.
type seenCount struct{ hits, fallbacks atomic.Int64 }

func (o *seenCount) ReceiveStart(ctx context.Context, _ []inbox.Message) (context.Context, func([]inbox.Receipt, error)) {
	return ctx, func([]inbox.Receipt, error) {}
}

func (o *seenCount) SeenLookup(_ string, r seen.Result, n int) {
	switch r {
	case seen.Hit:
		o.hits.Add(int64(n))
	case seen.Fallback:
		o.fallbacks.Add(int64(n))
	}
}

func (o *seenCount) SeenError(seen.Op, error) {}

// TestSinkSeenCache: a sink with a seen-key cache caches a batch's keys once it committed, not when
// its transaction rolled back, and counts the same duplicates and conflicts as without a cache.
func TestSinkSeenCache(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	cache, err := seen.NewLRU(seen.LRUConfig{})
	if err != nil {
		t.Fatal(err)
	}
	o := &seenCount{}
	s, err := adapters.NewSink(adapters.SinkConfig{Store: txinbox.Store{DB: db.Pool, Schema: db.Schema}, Consumer: "ledger", Key: adapters.MessageID(),
		SeenCache: cache, SeenTTL: time.Hour, Observer: o})
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
	db := testdb.New(t)
	allow := adaptertest.RefuseCommits(t, db)
	cache, err := seen.NewLRU(seen.LRUConfig{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := adapters.NewSink(adapters.SinkConfig{Store: db.Store(), Consumer: "ledger", Key: adapters.MessageID(),
		SeenCache: cache, SeenTTL: time.Hour})
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
