package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
	"github.com/txinbox/txinbox/worker"
)

// Bad input on the worker side: configuration refused with a typed error before anything is created,
// and messages no handler knows recorded as failures (ErrUnknownKind), never a crash.

func TestWorkerBadSchemaCreatesNothing(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(context.Context, pgx.Tx, *worker.Message[struct{}]) error { return nil })
	bad := []string{`a"b`, `a.b`, `x; DROP TABLE inbox; --`, `public"; DROP SCHEMA public CASCADE; --`,
		`a b`, `1abc`, "a\x00b", strings.Repeat("s", 64), `schéma`}
	candidates := testdb.SchemaCandidates(bad)
	before := testdb.ExistingSchemas(t, db.Pool, candidates)
	for _, s := range bad {
		p, err := worker.New(txinbox.Store{DB: db.Pool, Schema: s}, worker.Config{Consumer: "ledger", Handlers: hs})
		var ce *txinbox.ConfigError
		if !errors.Is(err, txinbox.ErrInvalidConfig) || !errors.As(err, &ce) || ce.Field != "Store.Schema" || p != nil {
			t.Errorf("schema %q: pool %v, err %v (%T), want a *txinbox.ConfigError for Store.Schema", s, p, err, err)
		}
	}
	// Other refused configuration, each with the field named.
	for name, cfg := range map[string]worker.Config{
		"Consumer":  {Consumer: "led ger", Handlers: hs},
		"Handlers":  {Consumer: "ledger"},
		"BatchSize": {Consumer: "ledger", Handlers: hs, BatchSize: 65},
		"Lease":     {Consumer: "ledger", Handlers: hs, Lease: time.Second, Timeout: 2 * time.Second},
	} {
		_, err := worker.New(db.Store(), cfg)
		var ce *txinbox.ConfigError
		if !errors.As(err, &ce) || ce.Field != name {
			t.Errorf("%s: err = %v, want a *txinbox.ConfigError for %s", name, err, name)
		}
	}
	if after := testdb.ExistingSchemas(t, db.Pool, candidates); after != before || !strings.Contains(before, "public") {
		t.Fatalf("schemas among %q: %q before, %q after; want the same, public included", candidates, before, after)
	}
}

// A message of a kind without a handler is dead at its first attempt (ErrUnknownKind); the pool goes
// on handling the other kinds.
func TestWorkerUnknownKindIsAFailureNotACrash(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	c, err := inbox.New(db.Store(), inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var msgs []inbox.Message
	for i := range 10 {
		msgs = append(msgs, inbox.Message{Consumer: "ledger", Key: fmt.Sprintf("c-%d", i), Kind: "credit", Payload: []byte(`{}`)})
	}
	msgs = append(msgs,
		inbox.Message{Consumer: "ledger", Key: "u-1", Kind: "NoSuchKind", Payload: []byte(`{}`)},
		inbox.Message{Consumer: "ledger", Key: "u-2", Kind: "credit.v2", Payload: []byte(`[1]`)})
	if _, err := c.ReceiveMany(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(context.Context, pgx.Tx, *worker.Message[struct{}]) error { return nil })
	p, err := worker.New(db.Store(), worker.Config{Consumer: "ledger", Handlers: hs, MaxAttempts: 3,
		PollInterval: 10 * time.Millisecond, Backoff: txinbox.BackoffFunc(func(int) time.Duration { return 10 * time.Millisecond })})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = p.Stop(sctx)
	})
	waitUntil(t, "the unknown kinds to die", func() bool {
		return db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE state = 'dead'`) == 2
	})
	rows, err := db.Pool.Query(ctx, db.SQL(`SELECT key, attempts_started, attempts_failed, coalesce(last_error, '')
		FROM {schema}.inbox WHERE state = 'dead' ORDER BY key`))
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var key, lastErr string
		var started, failed int
		if err := rows.Scan(&key, &started, &failed, &lastErr); err != nil {
			t.Fatal(err)
		}
		if started != 1 || failed != 1 || !strings.Contains(lastErr, worker.ErrUnknownKind.Error()) {
			t.Errorf("%s: %d started, %d failed, last error %q; want 1, 1 and ErrUnknownKind", key, started, failed, lastErr)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// The pool is still alive: a credit received now completes.
	if _, err := c.Receive(ctx, inbox.Message{Consumer: "ledger", Key: "c-late", Kind: "credit", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "every credit to complete", func() bool {
		return db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE state = 'completed' AND kind = 'credit'`) == 11
	})
}

// waitUntil polls cond until it holds; the generous deadline only keeps a broken test from hanging.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
