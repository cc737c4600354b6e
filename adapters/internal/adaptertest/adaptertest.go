// Package adaptertest holds what the broker adapters' tests share: broker discovery (failing in CI,
// skipping elsewhere), a test schema with SQL helpers ([DB], over txinboxtest), a database handle
// that can be switched between a dead and a live pool, the message plan of the duplicate/redelivery
// scenario, the inbox checks (stored once, received in order), the ledger check run through a
// worker.Pool, and commits refused at COMMIT ([RefuseCommits]). The checks every adapter runs are the
// public conformance suite's (package conformance).
package adaptertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/internal/limits"
	"github.com/txinbox/txinbox/txinboxtest"
	"github.com/txinbox/txinbox/worker"
)

// DB is one test's schema (txinboxtest.New: migrated, on a pool whose search_path it is, dropped
// when the test ends) with the SQL helpers the adapters' tests share.
type DB struct{ *txinboxtest.DB }

// NewDB returns a fresh schema for t (txinboxtest.New).
func NewDB(t testing.TB) *DB {
	t.Helper()
	return &DB{txinboxtest.New(t)}
}

// SQL replaces {schema} in query with the quoted schema name.
func (d *DB) SQL(query string) string {
	return strings.ReplaceAll(query, "{schema}", pgx.Identifier{d.Schema}.Sanitize())
}

// Count runs a count(*) style query (its text may use {schema}) and returns the result.
func (d *DB) Count(t testing.TB, query string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := d.Pool.QueryRow(context.Background(), d.SQL(query), args...).Scan(&n); err != nil {
		t.Fatalf("adaptertest: %s: %v", query, err)
	}
	return n
}

// Broker returns the URL of a message broker for t: the environment variable env if set, else def.
// If nothing answers at its address, t fails when CI=true (CI must not pass without the brokers it
// needs) and is skipped otherwise, with a message naming env. (examples/ledger, which cannot import
// this package, keeps a copy in its helpers_test.go.)
func Broker(t testing.TB, name, env, def string) string {
	t.Helper()
	u := os.Getenv(env)
	if u == "" {
		u = def
	}
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatalf("%s: bad URL %q: %v", env, u, err)
	}
	c, err := net.DialTimeout("tcp", pu.Host, 3*time.Second)
	if err != nil {
		msg := fmt.Sprintf("%s is not reachable at %s (%v); set %s or start it", name, pu.Host, err, env)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	_ = c.Close()
	return u
}

// Name returns a name unique to this test run, for queues, streams and topics.
func Name(prefix string) string {
	return fmt.Sprintf("%s-%d-%08x", prefix, time.Now().UnixNano(), rand.Uint32())
}

// SwitchDB is an txinbox.DB that forwards to the pool set last, so a test can take the database away
// (a pool on a closed port) and bring it back.
type SwitchDB struct{ p atomic.Pointer[pgxpool.Pool] }

// NewSwitchDB returns a SwitchDB using p.
func NewSwitchDB(p *pgxpool.Pool) *SwitchDB {
	s := &SwitchDB{}
	s.p.Store(p)
	return s
}

// Set makes later calls use p.
func (s *SwitchDB) Set(p *pgxpool.Pool) { s.p.Store(p) }

// Begin implements txinbox.DB.
func (s *SwitchDB) Begin(ctx context.Context) (pgx.Tx, error) { return s.p.Load().Begin(ctx) }

// Exec implements txinbox.DB.
func (s *SwitchDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return s.p.Load().Exec(ctx, sql, args...)
}

// Query implements txinbox.DB.
func (s *SwitchDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return s.p.Load().Query(ctx, sql, args...)
}

// QueryRow implements txinbox.DB.
func (s *SwitchDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return s.p.Load().QueryRow(ctx, sql, args...)
}

// DeadPool returns a pool whose every connection attempt is refused (a port nothing listens on).
func DeadPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	cfg, err := pgxpool.ParseConfig("postgres://postgres@" + addr + "/postgres?sslmode=disable&connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// Msg is one message to publish.
type Msg struct {
	Key     string
	Payload []byte
}

// Plan returns unique messages keyed prefix-0 … prefix-(n-1), with a JSON payload holding the event
// id, and the publishing order: every message once and dupPercent of them a second time (same key,
// same payload), shuffled with a fixed seed.
func Plan(prefix string, n, dupPercent int) (unique []Msg, publish []Msg) {
	r := rand.New(rand.NewPCG(uint64(n), uint64(dupPercent)))
	unique = make([]Msg, n)
	for i := range unique {
		k := fmt.Sprintf("%s-%d", prefix, i)
		unique[i] = Msg{Key: k, Payload: fmt.Appendf(nil, `{"event_id": %q, "amount": %d}`, k, i%97+1)}
	}
	publish = append(publish, unique...)
	for _, i := range r.Perm(n)[:n*dupPercent/100] {
		publish = append(publish, unique[i])
	}
	r.Shuffle(len(publish), func(i, j int) { publish[i], publish[j] = publish[j], publish[i] })
	return unique, publish
}

// WaitFor polls cond until it holds; the generous deadline only keeps a broken test from hanging (it
// is not a timing assertion).
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// InboxCount returns the number of stored messages of consumer.
func InboxCount(t testing.TB, db *DB, consumer string) int64 {
	t.Helper()
	return db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE consumer = $1`, consumer)
}

// CheckUnique fails t unless the inbox holds exactly the messages of unique for consumer: one row per
// key, pending, with the payload published under that key (compared as jsonb, the payload column's
// type: the adapters store the body as the message's JSON payload), and nothing else.
func CheckUnique(t testing.TB, db *DB, consumer string, unique []Msg) {
	t.Helper()
	ctx := context.Background()
	rows, err := db.Pool.Query(ctx, db.SQL(`SELECT key, payload::text, state, raw IS NULL FROM {schema}.inbox WHERE consumer = $1`), consumer)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for rows.Next() {
		var key, payload, state string
		var noRaw bool
		if err := rows.Scan(&key, &payload, &state, &noRaw); err != nil {
			t.Fatal(err)
		}
		if _, dup := got[key]; dup {
			t.Errorf("key %s stored twice", key)
		}
		if !noRaw || state == "dead" {
			t.Errorf("key %s stored as %s (raw kept: %v)", key, state, !noRaw)
		}
		got[key] = payload
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(unique) {
		t.Errorf("inbox holds %d messages, want %d", len(got), len(unique))
	}
	keys, payloads := make([]string, len(unique)), make([]string, len(unique))
	for i, m := range unique {
		if _, ok := got[m.Key]; !ok {
			t.Errorf("message %s is missing", m.Key)
		}
		keys[i], payloads[i] = m.Key, string(m.Payload)
	}
	rows, err = db.Pool.Query(ctx, db.SQL(`SELECT u.key, m.payload::text, u.payload
		FROM unnest($2::text[], $3::text[]) AS u (key, payload)
		JOIN {schema}.inbox m ON m.consumer = $1 AND m.key = u.key
		WHERE m.payload <> u.payload::jsonb
		ORDER BY u.key`), consumer, keys, payloads)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var key, stored, published string
		if err := rows.Scan(&key, &stored, &published); err != nil {
			t.Fatal(err)
		}
		t.Errorf("message %s stored with payload %s, published with %s", key, stored, published)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

// Ledger runs a worker.Pool over the inbox of consumer with a handler that applies each message to a
// ledger table (UNIQUE event_id) and counts its applications per event id, waits until every message
// finished, and checks that each unique message had exactly one effect: one ledger row and a count of
// one per message, no message dead or retried. (The count is kept per event id rather than in one
// row, so that concurrent batches do not queue on one row lock.)
func Ledger(t testing.TB, db *DB, consumer string, unique []Msg) {
	t.Helper()
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, db.SQL(`
		CREATE TABLE {schema}.ledger (event_id text NOT NULL UNIQUE, amount bigint NOT NULL);
		CREATE TABLE {schema}.ledger_applied (event_id text PRIMARY KEY, n bigint NOT NULL);`)); err != nil {
		t.Fatal(err)
	}
	type event struct {
		EventID string `json:"event_id"`
		Amount  int64  `json:"amount"`
	}
	insert := db.SQL(`INSERT INTO {schema}.ledger (event_id, amount) VALUES ($1, $2)`)
	count := db.SQL(`INSERT INTO {schema}.ledger_applied (event_id, n) VALUES ($1, 1)
		ON CONFLICT (event_id) DO UPDATE SET n = ledger_applied.n + 1`)
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[event]) error {
		if _, err := tx.Exec(ctx, insert, m.Payload.EventID, m.Payload.Amount); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, count, m.Payload.EventID)
		return err
	})
	p, err := worker.New(db.Store(), worker.Config{Consumer: consumer, Handlers: hs, PollInterval: 20 * time.Millisecond, BatchSize: limits.PoolBatchSize})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_ = p.Stop(sctx)
	}()
	n := int64(len(unique))
	t0 := time.Now()
	defer func() { t.Logf("ledger: %d messages applied in %v", n, time.Since(t0).Round(time.Millisecond)) }()
	WaitFor(t, "every message to complete", func() bool {
		return db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE consumer = $1 AND state IN ('completed', 'dead')`, consumer) == n
	})
	if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE consumer = $1 AND state = 'completed' AND attempts_failed = 0`, consumer); got != n {
		t.Errorf("%d messages completed at the first attempt, want %d", got, n)
	}
	if got := db.Count(t, `SELECT count(*) FROM {schema}.ledger`); got != n {
		t.Errorf("ledger holds %d rows, want %d", got, n)
	}
	if got := db.Count(t, `SELECT count(*) FROM {schema}.ledger_applied WHERE n = 1`); got != n {
		t.Errorf("%d events applied exactly once, want %d", got, n)
	}
	if got := db.Count(t, `SELECT coalesce(sum(n), 0) FROM {schema}.ledger_applied`); got != n {
		t.Errorf("%d applications in all, want %d (one effect per message)", got, n)
	}
}

// BatchFields returns the fields of adapters.BatchConfig that must not be negative.
func BatchFields() []string {
	return []string{"BatchSize", "BatchWait", "RetryDelay", "MaxRetryDelay", "WriteTimeout"}
}

// NegativeFields checks an adapter's New: cfg must be accepted, and a copy of cfg with any one of
// fields (its own or promoted from the embedded adapters.BatchConfig) set to -1 must be refused with
// an *txinbox.ConfigError naming that field.
func NegativeFields[C any](t *testing.T, cfg C, newFn func(C) error, fields ...string) {
	t.Helper()
	if err := newFn(cfg); err != nil {
		t.Fatalf("valid config refused: %v", err)
	}
	for _, name := range fields {
		bad := cfg
		f := reflect.ValueOf(&bad).Elem().FieldByName(name)
		if !f.IsValid() || !f.CanInt() {
			t.Fatalf("config has no integer field %s", name)
		}
		f.SetInt(-1)
		err := newFn(bad)
		var ce *txinbox.ConfigError
		if !errors.As(err, &ce) || ce.Field != name {
			t.Errorf("%s = -1: New returned %v, want an *txinbox.ConfigError naming %s", name, err, name)
		}
	}
}
