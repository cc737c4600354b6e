// Package pubtest holds the outbox the tests of the publishers use: a real outbox on a real
// PostgreSQL (txinboxtest, through adaptertest.DB) with a Client to publish in transactions of the
// test's and relays over it. The checks every publisher runs are the public conformance suite's
// (package conformance), which uses it too.
package pubtest

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/adapters/internal/adaptertest"
	"github.com/txinbox/txinbox/outbox"
)

// Env is one test's outbox: a migrated schema of its own and a Client on it.
type Env struct {
	DB     *adaptertest.DB
	Client *outbox.Client
}

// New returns an Env for t.
func New(t testing.TB) *Env {
	t.Helper()
	db := adaptertest.NewDB(t)
	c, err := outbox.New(db.Store(), outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return &Env{DB: db, Client: c}
}

// Publish publishes msgs in one transaction, which it commits if commit is true and rolls back
// otherwise, and returns their ids.
func (e *Env) Publish(t testing.TB, commit bool, msgs ...outbox.Message) []string {
	t.Helper()
	ctx := context.Background()
	tx, err := e.DB.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	ids, err := e.Client.Publish(ctx, tx, msgs...)
	if err != nil {
		t.Fatal(err)
	}
	if commit {
		err = tx.Commit(ctx)
	} else {
		err = tx.Rollback(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// Results is an outbox.Observer that keeps every recorded attempt.
type Results struct {
	mu  sync.Mutex
	all []outbox.Result
}

// Finished implements outbox.Observer.
func (r *Results) Finished(res outbox.Result) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.all = append(r.all, res)
}

// All returns the attempts recorded so far, in the order they were recorded.
func (r *Results) All() []outbox.Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.all)
}

// Of returns the attempts recorded so far of the event id.
func (r *Results) Of(id string) []outbox.Result {
	var out []outbox.Result
	for _, res := range r.All() {
		if res.Event.ID == id {
			out = append(out, res)
		}
	}
	return out
}

// Relay starts a relay of e's outbox with pub, fast test settings (20ms polls and backoff, up to 1000
// attempts) and mod applied, stopped when t ends, and returns the Observer of its attempts.
func (e *Env) Relay(t testing.TB, pub outbox.Publisher, mod func(*outbox.RelayConfig)) *Results {
	t.Helper()
	res := &Results{}
	cfg := outbox.RelayConfig{Publisher: pub, PollInterval: 20 * time.Millisecond, MaxAttempts: 1000,
		Backoff:  txinbox.BackoffFunc(func(int) time.Duration { return 20 * time.Millisecond }),
		Observer: res, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))}
	if mod != nil {
		mod(&cfg)
	}
	r, err := outbox.NewRelay(e.DB.Store(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := r.Stop(ctx); err != nil {
			t.Errorf("stopping the relay: %v", err)
		}
	})
	return res
}

// Row is an event's row in the outbox.
type Row struct {
	State          string
	AttemptsFailed int
	LastError      string
}

// Row returns the outbox row of the event id.
func (e *Env) Row(t testing.TB, id string) Row {
	t.Helper()
	var r Row
	var lastErr *string
	err := e.DB.Pool.QueryRow(context.Background(), e.DB.SQL(`SELECT state, attempts_failed, last_error FROM {schema}.outbox WHERE event_id = $1`), id).
		Scan(&r.State, &r.AttemptsFailed, &lastErr)
	if err != nil {
		t.Fatalf("outbox row of %s: %v", id, err)
	}
	if lastErr != nil {
		r.LastError = *lastErr
	}
	return r
}

// WaitSent waits until every event of ids is sent, failing t if one becomes dead.
func (e *Env) WaitSent(t testing.TB, ids []string) {
	t.Helper()
	adaptertest.WaitFor(t, fmt.Sprintf("%d events to be sent", len(ids)), func() bool {
		rows, err := e.DB.Pool.Query(context.Background(), e.DB.SQL(`SELECT event_id::text, state, coalesce(last_error, '') FROM {schema}.outbox WHERE event_id = ANY($1::uuid[])`), ids)
		if err != nil {
			t.Fatal(err)
		}
		sent := 0
		var id, state, lastErr string
		_, err = pgx.ForEachRow(rows, []any{&id, &state, &lastErr}, func() error {
			switch state {
			case "sent":
				sent++
			case "dead":
				t.Fatalf("event %s is dead: %s", id, lastErr)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return sent == len(ids)
	})
}
