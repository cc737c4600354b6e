package maintain_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/maintain"
	"github.com/txinbox/txinbox/runner"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
	"github.com/txinbox/txinbox/worker"
)

// env is one test's schema with a table that handlers write their effects to.
type env struct {
	*testdb.DB
	client *inbox.Client
	tracer txinbox.OperationTracer // the Store's Tracer of the runners made by pool
}

// with returns a copy of e whose runners (pool) have the Store's Tracer t.
func (e *env) with(t txinbox.OperationTracer) *env {
	c := *e
	c.tracer = t
	return &c
}

func newEnv(t *testing.T) *env { return newEnvOn(t, testdb.New(t)) }

// newEnvOn is newEnv on db.
func newEnvOn(t *testing.T, db *testdb.DB) *env {
	t.Helper()
	c, err := inbox.New(db.Store(), inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(context.Background(), db.SQL(`CREATE TABLE {schema}.effects (
		key text PRIMARY KEY, amount bigint NOT NULL)`)); err != nil {
		t.Fatal(err)
	}
	return &env{DB: db, client: c}
}

type credit struct {
	Amount int64 `json:"amount"`
}

// applyCredit writes one row per message key (a second application would fail on the primary key).
func applyCredit(ctx context.Context, tx pgx.Tx, schema string, m *worker.Message[credit]) error {
	_, err := tx.Exec(ctx, "INSERT INTO "+pgx.Identifier{schema, "effects"}.Sanitize()+" (key, amount) VALUES ($1, $2)", m.Key, m.Payload.Amount)
	return err
}

// creditHandlers are handlers applying every credit message.
func (e *env) creditHandlers() *worker.Handlers {
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		return applyCredit(ctx, tx, e.Schema, m)
	})
	return hs
}

// receive stores credit messages of consumer ledger.
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

// pool returns a Runner of one pool of consumer ledger (polling fast) and the schema's maintainer
// candidate; mod, if not nil, changes the pool's and the maintainer's Config.
func (e *env) pool(t *testing.T, hs *worker.Handlers, mod func(*worker.Config, *maintain.Config)) *runner.Runner {
	t.Helper()
	return e.poolLogging(t, nil, hs, mod)
}

// poolLogging is pool logging to logs (nil: slog.Default()), the Store's Logger.
func (e *env) poolLogging(t *testing.T, logs *logBuffer, hs *worker.Handlers, mod func(*worker.Config, *maintain.Config)) *runner.Runner {
	t.Helper()
	store := e.Store()
	if logs != nil {
		store.Logger = logs.logger()
	}
	cfg := worker.Config{Consumer: "ledger", Handlers: hs, PollInterval: 20 * time.Millisecond,
		Backoff: txinbox.BackoffFunc(func(int) time.Duration { return 10 * time.Millisecond })}
	var mc maintain.Config
	if mod != nil {
		mod(&cfg, &mc)
	}
	store.Tracer = e.tracer
	r, err := runner.New(store, runner.Config{Pools: []worker.Config{cfg}, Maintenance: mc})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// run starts s and stops it when t ends.
func run(t *testing.T, s txinbox.Service) {
	t.Helper()
	testdb.Run(t, s)
}

// maintainer starts a Maintainer of e's schema and stops it when t ends.
func (e *env) maintainer(t *testing.T, cfg maintain.Config) *maintain.Maintainer {
	t.Helper()
	return maintainerOf(t, e.Store(), cfg)
}

// maintainerOf starts a Maintainer of store and stops it when t ends.
func maintainerOf(t *testing.T, store txinbox.Store, cfg maintain.Config) *maintain.Maintainer {
	t.Helper()
	m, err := maintain.New(store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = m.Stop(ctx)
	})
	return m
}

// completed counts the completed messages.
func (e *env) completed(t *testing.T) int64 {
	return e.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE state = 'completed'`)
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

func keys(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// logBuffer collects a JSON slog handler's output; safe for concurrent use.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// find returns the records whose message is msg.
func (b *logBuffer) find(t *testing.T, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, r := range b.records(t) {
		if r["msg"] == msg {
			out = append(out, r)
		}
	}
	return out
}

// records returns every record, failing the test on a line that is not JSON.
func (b *logBuffer) records(t *testing.T) []map[string]any {
	t.Helper()
	b.mu.Lock()
	text := b.buf.String()
	b.mu.Unlock()
	return parseRecords(t, text)
}

func parseRecords(t *testing.T, text string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(text), "\n") {
		if line == "" {
			continue
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line is not JSON: %q: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}
