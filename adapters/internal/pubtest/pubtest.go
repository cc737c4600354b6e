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

// Result is one recorded attempt of a relay, as its Store's Tracer is told of it (txinbox.OpRelayed).
type Result struct {
	EventID string
	Attempt int
	Outcome txinbox.Outcome
	Err     error
}

// Results is a Store's Tracer that keeps every recorded attempt of a relay (txinbox.OpRelayed), and
// the events as the relay first handed them over to its Publisher.
type Results struct {
	mu     sync.Mutex
	all    []Result
	handed map[string]outbox.Event // by id
}

// handOver keeps the events of a Publish call that are handed over for the first time.
func (r *Results) handOver(events []outbox.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.handed == nil {
		r.handed = map[string]outbox.Event{}
	}
	for _, ev := range events {
		if _, ok := r.handed[ev.ID]; !ok {
			r.handed[ev.ID] = ev
		}
	}
}

type startKey struct{}

// TraceStart implements txinbox.OperationTracer.
func (r *Results) TraceStart(ctx context.Context, d txinbox.TraceStart) context.Context {
	if d.Op != txinbox.OpRelayed {
		return ctx
	}
	return context.WithValue(ctx, startKey{}, d)
}

// TraceEnd implements txinbox.OperationTracer.
func (r *Results) TraceEnd(ctx context.Context, d txinbox.TraceEnd) {
	s, ok := ctx.Value(startKey{}).(txinbox.TraceStart)
	if !ok || d.Op != txinbox.OpRelayed || len(s.Messages) != 1 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.all = append(r.all, Result{EventID: s.Messages[0].ID, Attempt: s.Attempt, Outcome: d.Outcome, Err: d.Err})
}

// All returns the attempts recorded so far, in the order they were recorded.
func (r *Results) All() []Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.all)
}

// Handed returns the event id as the relay first handed it over to its Publisher, and whether it did.
func (r *Results) Handed(id string) (outbox.Event, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ev, ok := r.handed[id]
	return ev, ok
}

// Of returns the attempts recorded so far of the event id.
func (r *Results) Of(id string) []Result {
	var out []Result
	for _, res := range r.All() {
		if res.EventID == id {
			out = append(out, res)
		}
	}
	return out
}

// handing is a Publisher that keeps the events handed over (Results.handOver) and passes them to
// pub. It is an outbox.TopicChecker asking pub, if pub is one, so that the relay checks the topics as
// it would with pub itself.
type handing struct {
	pub outbox.Publisher
	res *Results
}

func (h handing) Publish(ctx context.Context, events []outbox.Event) error {
	h.res.handOver(events)
	return h.pub.Publish(ctx, events)
}

func (h handing) CheckTopic(topic string) error {
	if tc, ok := h.pub.(outbox.TopicChecker); ok {
		return tc.CheckTopic(topic)
	}
	return nil
}

// Relay starts a relay of e's outbox with pub, fast test settings (20ms polls and backoff, up to 1000
// attempts) and mod applied, stopped when t ends, and returns its recorded attempts (the Tracer of
// its Store).
func (e *Env) Relay(t testing.TB, pub outbox.Publisher, mod func(*outbox.RelayConfig)) *Results {
	t.Helper()
	res := &Results{}
	cfg := outbox.RelayConfig{Publisher: handing{pub, res}, PollInterval: 20 * time.Millisecond, MaxAttempts: 1000,
		Backoff: txinbox.BackoffFunc(func(int) time.Duration { return 20 * time.Millisecond })}
	if mod != nil {
		mod(&cfg)
	}
	store := e.DB.Store()
	store.Tracer = res
	store.Logger = slog.New(slog.NewTextHandler(t.Output(), nil))
	r, err := outbox.NewRelay(store, cfg)
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
