package worker_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
	"github.com/txinbox/txinbox/worker"
)

// env is one test's schema with a ledger table that handlers write their effects to.
type env struct {
	*testdb.DB
	client *inbox.Client
	tracer txinbox.OperationTracer // the Store's Tracer of the pools made by pool and batchPool
}

// with returns a copy of e whose pools (pool, batchPool) have the Store's Tracer t.
func (e *env) with(t txinbox.OperationTracer) *env {
	c := *e
	c.tracer = t
	return &c
}

func newEnv(t *testing.T) *env { return newBenchEnv(t) }

func newBenchEnv(t testing.TB) *env { return newEnvOn(t, testdb.New(t)) }

// newEnvOn is newEnv on db.
func newEnvOn(t testing.TB, db *testdb.DB) *env {
	t.Helper()
	c, err := inbox.New(db.Store(), inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(context.Background(), db.SQL(`CREATE TABLE {schema}.effects (
		key text PRIMARY KEY, amount bigint NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`)); err != nil {
		t.Fatal(err)
	}
	return &env{DB: db, client: c}
}

type credit struct {
	Amount int64 `json:"amount"`
}

// applyCredit is the effect every test handler applies: one row per message key. The primary key would
// turn a second application into an error, so exactly-once is checked both by counting and by the
// constraint.
func applyCredit(ctx context.Context, tx pgx.Tx, schema string, m *worker.Message[credit]) error {
	_, err := tx.Exec(ctx, "INSERT INTO "+pgx.Identifier{schema, "effects"}.Sanitize()+" (key, amount) VALUES ($1, $2)", m.Key, m.Payload.Amount)
	return err
}

func (e *env) receive(t *testing.T, keys ...string) {
	t.Helper()
	msgs := make([]inbox.Message, len(keys))
	for i, k := range keys {
		msgs[i] = inbox.Message{Consumer: "ledger", Key: k, Kind: "credit", Payload: []byte(`{"amount": 1}`)}
	}
	if _, err := e.client.ReceiveMany(context.Background(), msgs); err != nil {
		t.Fatal(err)
	}
}

func (e *env) pool(t *testing.T, hs *worker.Handlers, mod func(*worker.Config)) *worker.Pool {
	t.Helper()
	return e.poolOn(t, e.Store(), hs, mod)
}

// storeLogging is e's Store with logs as its Logger.
func (e *env) storeLogging(logs *logBuffer) txinbox.Store {
	st := e.Store()
	st.Logger = logs.logger()
	return st
}

// poolOn is pool on store (e's schema).
func (e *env) poolOn(t *testing.T, store txinbox.Store, hs *worker.Handlers, mod func(*worker.Config)) *worker.Pool {
	t.Helper()
	cfg := worker.Config{Consumer: "ledger", Handlers: hs, PollInterval: 20 * time.Millisecond,
		Backoff: txinbox.BackoffFunc(func(int) time.Duration { return 10 * time.Millisecond })}
	if mod != nil {
		mod(&cfg)
	}
	if store.Tracer == nil {
		store.Tracer = e.tracer
	}
	p, err := worker.New(store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// No safety net for ordering keys in tests: a blocked message that is not made ready when its
	// key's previous message finishes never runs, and its test fails.
	worker.SetOrderingSnooze(p, time.Hour)
	return p
}

// run starts p and stops it when t ends.
func run(t *testing.T, p *worker.Pool) {
	t.Helper()
	testdb.Run(t, p)
}

// waitFor polls cond until it holds or a generous deadline passes (a correctness wait, not a timing
// assertion: the deadline only keeps a broken test from hanging).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitProgress is waitFor for a long run that reports its progress (a count that grows while it
// works): it gives up only when progress has not changed for waitFor's deadline, so a slow run on a
// loaded machine is waited for and a stalled one still fails.
func waitProgress(t *testing.T, what string, cond func() bool, progress func() int) {
	t.Helper()
	last, deadline := progress(), time.Now().Add(2*time.Minute)
	for !cond() {
		if n := progress(); n != last {
			last, deadline = n, time.Now().Add(2*time.Minute)
		}
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s: no progress for 2 minutes (at %d)", what, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// msgView is the inbox as readers see it (migration 00011): a message listed in a batch in flight
// (inbox_batch) is processing, and a queued message's attempts started and token are those of its
// queue row.
const msgView = `(SELECT m.id, m.consumer, m.key, (CASE WHEN b.id IS NOT NULL THEN 'processing' ELSE m.state END) AS state,
	coalesce(q.attempts_started, m.attempts_started) AS attempts_started, m.attempts_failed, m.last_error,
	coalesce(q.token, m.token) AS token, coalesce(b.owner, m.owner) AS owner
	FROM {schema}.inbox m LEFT JOIN {schema}.inbox_queue q ON q.id = m.id AND q.consumer = m.consumer
	LEFT JOIN LATERAL (SELECT b.id, b.owner FROM {schema}.inbox_batch b WHERE b.consumer = m.consumer AND m.id = ANY (b.ids) LIMIT 1) b ON true)`

// inFlight counts the messages listed in batches in flight (or left behind by a crash).
func (e *env) inFlight(t testing.TB) int64 {
	t.Helper()
	return e.Count(t, `SELECT coalesce(sum(cardinality(ids)), 0)::bigint FROM {schema}.inbox_batch`)
}

func (e *env) state(t *testing.T, key string) (state string, started, failed int, lastErr string) {
	t.Helper()
	var le *string
	err := e.Pool.QueryRow(context.Background(), e.SQL(`SELECT state, attempts_started, attempts_failed, last_error
		FROM `+msgView+` m WHERE consumer = 'ledger' AND key = $1`), key).Scan(&state, &started, &failed, &le)
	if err != nil {
		t.Fatalf("state of %s: %v", key, err)
	}
	if le != nil {
		lastErr = *le
	}
	return
}

// lastFailure returns the error of the last failed attempt in the history of the message of key
// ("" if none failed): a completed message holds no last_error.
func (e *env) lastFailure(t *testing.T, key string) string {
	t.Helper()
	var le *string
	if err := e.Pool.QueryRow(context.Background(), e.SQL(`SELECT history -> -1 ->> 'error'
		FROM {schema}.inbox WHERE consumer = 'ledger' AND key = $1`), key).Scan(&le); err != nil {
		t.Fatalf("history of %s: %v", key, err)
	}
	if le == nil {
		return ""
	}
	return *le
}

func (e *env) count(t *testing.T, state string) int64 {
	return e.Count(t, `SELECT count(*) FROM `+msgView+` m WHERE state = $1`, state)
}

func keys(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// deliver receives deliveries (keys of credit messages of consumer ledger, duplicates allowed) from 8
// concurrent producers, chunk keys per ReceiveMany, and returns how many were inserted.
func (e *env) deliver(t *testing.T, deliveries []string, chunk int) int64 {
	t.Helper()
	var wg sync.WaitGroup
	var inserted atomic.Int64
	chunks := make(chan []string)
	for range 8 {
		wg.Go(func() {
			for keys := range chunks {
				msgs := make([]inbox.Message, len(keys))
				for i, k := range keys {
					msgs[i] = inbox.Message{Consumer: "ledger", Key: k, Kind: "credit", Payload: []byte(`{"amount":1}`)}
				}
				rs, err := e.client.ReceiveMany(context.Background(), msgs)
				if err != nil {
					t.Error(err)
					return
				}
				for _, r := range rs {
					if r.Outcome == inbox.Inserted {
						inserted.Add(1)
					} else if r.Err != nil {
						t.Error(r.Err)
					}
				}
			}
		})
	}
	for i := 0; i < len(deliveries); i += chunk {
		chunks <- deliveries[i:min(i+chunk, len(deliveries))]
	}
	close(chunks)
	wg.Wait()
	return inserted.Load()
}
