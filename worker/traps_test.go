package worker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/txinboxtest/tracerec"
	"github.com/txinbox/txinbox/worker"
)

// Traps a new user fell into: each test here failed before its fix.

// Start on a schema without txinbox's tables fails at once with txinbox.ErrNotMigrated, instead of
// starting and logging a claim failure many times a second.
func TestStartFailsOnUnmigratedSchema(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error { return nil })
	empty := e.Schema + "_empty"
	if _, err := e.Pool.Exec(context.Background(), "CREATE SCHEMA "+pgx.Identifier{empty}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = e.Pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{empty}.Sanitize()+" CASCADE")
	})
	for _, schema := range []string{empty, e.Schema + "_missing"} {
		logs := &logBuffer{}
		p, err := worker.New(txinbox.Store{DB: e.Pool, Schema: schema, Logger: logs.logger()}, worker.Config{Consumer: "ledger", Handlers: hs})
		if err != nil {
			t.Fatal(err)
		}
		err = p.Start(context.Background())
		if !errors.Is(err, txinbox.ErrNotMigrated) || !strings.Contains(err.Error(), schema) {
			t.Fatalf("Start on schema %q = %v, want txinbox.ErrNotMigrated naming the schema", schema, err)
		}
		if err := p.Stop(context.Background()); err != nil {
			t.Fatalf("Stop of a pool that did not start = %v", err)
		}
		if n := len(logs.find(t, "txinbox: claim failed")); n != 0 {
			t.Fatalf("%d claim failures logged: the pool ran", n)
		}
	}
}

// Start on a database that does not answer starts anyway (claims retry with backoff) and says so: only
// a schema known to lack the tables fails Start. (The chaos run cuts connections at random; a Start that
// failed on a cut connection ended its worker process.)
func TestStartWithUnreachableDatabase(t *testing.T) {
	t.Parallel()
	down, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(down.Close)
	logs := &logBuffer{}
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error { return nil })
	p, err := worker.New(txinbox.Store{DB: down, NotifyInterval: -1, Logger: logs.logger()}, worker.Config{Consumer: "ledger", Handlers: hs})
	if err != nil {
		t.Fatal(err)
	}
	run(t, p)
	recs := logs.find(t, "txinbox: could not check the schema's tables; starting anyway")
	if len(recs) != 1 || recs[0]["level"] != "WARN" || recs[0]["schema"] != "public" {
		t.Fatalf("records %v, want one WARN naming the schema", recs)
	}
	waitFor(t, "a claim failure logged", func() bool { return len(logs.find(t, "txinbox: claim failed")) > 0 })
}

// A pgxpool smaller than Concurrency is reported once at Start (it used to cap Concurrency silently).
func TestStartWarnsOnSmallPgxpool(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg, err := pgxpool.ParseConfig(e.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 3
	small, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(small.Close)
	logs := &logBuffer{}
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error { return nil })
	p, err := worker.New(txinbox.Store{DB: small, Schema: e.Schema, NotifyInterval: -1, Logger: logs.logger()}, worker.Config{Consumer: "ledger",
		Handlers: hs, Concurrency: 4})
	if err != nil {
		t.Fatal(err)
	}
	run(t, p)
	recs := logs.find(t, "txinbox: the pgxpool has fewer connections than Concurrency; fewer batches run at once")
	if len(recs) != 1 || recs[0]["level"] != "WARN" || recs[0]["max_conns"] != float64(3) || recs[0]["concurrency"] != float64(4) {
		t.Fatalf("pool size warnings = %v, want one WARN with max_conns 3, concurrency 4", recs)
	}
}

// Handle checks its arguments at once and panics on a programming error, like net/http's ServeMux.
func TestHandleValidatesAtOnce(t *testing.T) {
	t.Parallel()
	nop := func(context.Context, pgx.Tx, *worker.Message[credit]) error { return nil }
	frozen := worker.NewHandlers()
	worker.Handle(frozen, "credit", nop)
	if _, err := worker.New(txinbox.Store{DB: newEnv(t).Pool}, worker.Config{Consumer: "ledger", Handlers: frozen}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, want string
		register   func()
	}{
		{"nil handlers", "nil Handlers", func() { worker.Handle(nil, "credit", nop) }},
		{"zero handlers", "nil Handlers", func() { worker.Handle(&worker.Handlers{}, "credit", nop) }},
		{"nil func", "nil handler func", func() { worker.Handle[credit](worker.NewHandlers(), "credit", nil) }},
		{"empty kind", "must not be empty", func() { worker.Handle(worker.NewHandlers(), "", nop) }},
		{"invalid kind", "kind", func() { worker.Handle(worker.NewHandlers(), "credit card", nop) }},
		{"kind with NUL", "kind", func() { worker.Handle(worker.NewHandlers(), "credit\x00", nop) }},
		{"twice", "registered twice", func() {
			hs := worker.NewHandlers()
			worker.Handle(hs, "credit", nop)
			worker.Handle(hs, "credit", nop)
		}},
		{"two configs", "at most one HandlerConfig", func() {
			worker.Handle(worker.NewHandlers(), "credit", nop, worker.HandlerConfig{}, worker.HandlerConfig{})
		}},
		{"negative attempts", "must not be negative", func() {
			worker.Handle(worker.NewHandlers(), "credit", nop, worker.HandlerConfig{MaxAttempts: -1})
		}},
		{"after New", "already given to worker.New", func() { worker.Handle(frozen, "debit", nop) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				msg := fmt.Sprint(recover())
				if !strings.Contains(msg, tc.want) || !strings.HasPrefix(msg, "txinbox: worker.Handle(") {
					t.Fatalf("panic = %q, want one containing %q", msg, tc.want)
				}
			}()
			tc.register()
		})
	}
}

type strictCredit struct {
	Amount int64 `json:"amount"`
}

// DisallowUnknownFields makes a misspelled field a decode error (dead at once, never handled);
// without it the field is silently zero, as encoding/json does.
func TestStrictDecoding(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	msgs := []inbox.Message{
		{Consumer: "ledger", Key: "strict-typo", Kind: "strict", Payload: []byte(`{"amuont": 5}`)},
		{Consumer: "ledger", Key: "strict-ok", Kind: "strict", Payload: []byte(`{"amount": 5}`)},
		{Consumer: "ledger", Key: "lax-typo", Kind: "lax", Payload: []byte(`{"amuont": 5}`)},
	}
	if _, err := e.client.ReceiveMany(context.Background(), msgs); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	handled := map[string]int64{}
	record := func(ctx context.Context, tx pgx.Tx, m *worker.Message[strictCredit]) error {
		mu.Lock()
		handled[m.Key] = m.Payload.Amount
		mu.Unlock()
		return nil
	}
	hs := worker.NewHandlers()
	worker.Handle(hs, "strict", record, worker.HandlerConfig{DisallowUnknownFields: true})
	worker.Handle(hs, "lax", record)
	run(t, e.pool(t, hs, nil))
	waitFor(t, "all finished", func() bool { return e.count(t, "completed")+e.count(t, "dead") == 3 })
	if s, started, _, lastErr := e.state(t, "strict-typo"); s != "dead" || started != 1 || !strings.Contains(lastErr, `unknown field "amuont"`) {
		t.Fatalf("strict-typo: %s after %d attempts (%q), want dead at once with the unknown field named", s, started, lastErr)
	}
	mu.Lock()
	defer mu.Unlock()
	if _, ran := handled["strict-typo"]; ran || handled["strict-ok"] != 5 || handled["lax-typo"] != 0 || len(handled) != 2 {
		t.Fatalf("handled = %v, want strict-ok 5 and lax-typo 0 (the typo ignored) only", handled)
	}
}

// Failures are logged: a retry at Debug, a dead letter at Warn, each with consumer, kind, id, key,
// attempt, reason and error. The Store's Tracer is told each (txinbox.OpHandled) with the same
// identity and the error.
func TestFailuresAreLoggedAndObserved(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.receive(t, "flaky")
	errFlaky := errors.New("flaky downstream")
	logs := &logBuffer{}
	rec := &tracerec.Recorder{}
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		return fmt.Errorf("attempt %d: %w", m.Attempt, errFlaky)
	}, worker.HandlerConfig{MaxAttempts: 2})
	run(t, e.with(rec).poolOn(t, e.storeLogging(logs), hs, nil))
	waitFor(t, "flaky dead", func() bool { return e.count(t, "dead") == 1 })
	var id int64
	if err := e.Pool.QueryRow(context.Background(), e.SQL(`SELECT id FROM {schema}.inbox WHERE key = 'flaky'`)).Scan(&id); err != nil {
		t.Fatal(err)
	}
	check := func(msg, level string, attempt int) {
		t.Helper()
		recs := logs.find(t, msg)
		if len(recs) != 1 {
			t.Fatalf("%d records %q, want 1", len(recs), msg)
		}
		r := recs[0]
		want := map[string]any{"level": level, "consumer": "ledger", "kind": "credit", "id": float64(id), "key": "flaky",
			"attempt": float64(attempt), "reason": "error", "err": fmt.Sprintf("attempt %d: flaky downstream", attempt)}
		for k, v := range want {
			if r[k] != v {
				t.Errorf("%q record %s = %v, want %v (record %v)", msg, k, r[k], v, r)
			}
		}
	}
	check("txinbox: attempt failed; will retry", "DEBUG", 1)
	check("txinbox: message is dead", "WARN", 2)

	waitFor(t, "two outcomes told", func() bool { return len(handledOf(rec, "credit")) == 2 })
	for i, op := range handledOf(rec, "credit") {
		wantOutcome := []txinbox.Outcome{txinbox.OutcomeRetry, txinbox.OutcomeDead}[i]
		s, end := op.Start, op.End
		if s.Schema != e.Schema || s.Consumer != "ledger" || s.Messages[0].ID != "flaky" || s.Messages[0].Consumer != "ledger" ||
			s.Attempt != i+1 || end.Outcome != wantOutcome || end.Reason != "error" || !errors.Is(end.Err, errFlaky) {
			t.Errorf("outcome %d = %+v, want key flaky of ledger, attempt %d, %s, reason error, Err wrapping errFlaky", i, op, i+1, wantOutcome)
		}
	}
}
