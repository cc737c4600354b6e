package outbox_test

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
	"github.com/txinbox/txinbox/outbox"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// env is one test's schema and a Client on it.
type env struct {
	*testdb.DB
	client *outbox.Client
}

func newEnv(t *testing.T) *env {
	t.Helper()
	db := testdb.New(t)
	c, err := outbox.New(db.Store(), outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return &env{DB: db, client: c}
}

// publish publishes msgs in a transaction of its own, committed, and returns their ids.
func (e *env) publish(t *testing.T, msgs ...outbox.Message) []string {
	t.Helper()
	ctx := context.Background()
	var ids []string
	err := pgx.BeginFunc(ctx, e.Pool, func(tx pgx.Tx) error {
		var err error
		ids, err = e.client.Publish(ctx, tx, msgs...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// msg is an event of topic and key whose payload names n.
func msg(topic, key string, n int) outbox.Message {
	return outbox.Message{Topic: topic, Key: key, Payload: fmt.Appendf(nil, `{"n":%d}`, n)}
}

// relay returns a relay of e's schema with pub, fast test settings, mod applied, and no ordering
// snooze safety net (an event left snoozed never goes, and its test fails).
func (e *env) relay(t *testing.T, pub outbox.Publisher, mod func(*outbox.RelayConfig)) *outbox.Relay {
	t.Helper()
	return relayOn(t, e.Store(), pub, mod)
}

// storeLogging is e's Store with logger as its Logger.
func (e *env) storeLogging(logger *slog.Logger) txinbox.Store {
	st := e.Store()
	st.Logger = logger
	return st
}

// relayOn is env.relay on st (a pool of the test's own, say).
func relayOn(t *testing.T, st txinbox.Store, pub outbox.Publisher, mod func(*outbox.RelayConfig)) *outbox.Relay {
	t.Helper()
	cfg := outbox.RelayConfig{Publisher: pub, PollInterval: 20 * time.Millisecond,
		Backoff: txinbox.BackoffFunc(func(int) time.Duration { return 10 * time.Millisecond })}
	if mod != nil {
		mod(&cfg)
	}
	r, err := outbox.NewRelay(st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	outbox.SetSnooze(r, time.Hour)
	return r
}

// run starts r and stops it when t ends.
func run(t *testing.T, r *outbox.Relay) {
	t.Helper()
	testdb.Run(t, r)
}

// stop stops r, failing t if it does not stop in time.
func stop(t *testing.T, r *outbox.Relay) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // only keeps a hang from lasting
	defer cancel()
	if err := r.Stop(ctx); err != nil {
		t.Fatalf("stopping the relay: %v", err)
	}
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

// await waits for ch to be closed (with waitFor's deadline).
func await(t *testing.T, what string, ch chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(2 * time.Minute):
		t.Fatalf("gave up waiting for %s", what)
	}
}

// count returns the number of events in state.
func (e *env) count(t *testing.T, state string) int64 {
	return e.Count(t, `SELECT count(*) FROM {schema}.outbox WHERE state = $1`, state)
}

// recorder is a Publisher that keeps every event it is handed, in order, and checks the promises
// of a Publish call: its events have distinct keys, and no key has two events in flight at once
// (across concurrent calls). fail, if set, decides the error of each event (nil: acknowledged).
type recorder struct {
	t    *testing.T
	fail func(ev outbox.Event) error

	mu       sync.Mutex
	got      []outbox.Event // every event handed over, in the order of the calls
	acked    []outbox.Event // the events acknowledged
	inFlight map[string]bool
	calls    int
}

func newRecorder(t *testing.T, fail func(outbox.Event) error) *recorder {
	return &recorder{t: t, fail: fail, inFlight: map[string]bool{}}
}

func (r *recorder) Publish(_ context.Context, events []outbox.Event) error {
	r.mu.Lock()
	r.calls++
	var keys []string
	for _, ev := range events {
		if ev.Key == "" {
			continue
		}
		if slices.Contains(keys, ev.Key) {
			r.t.Errorf("one Publish call has two events of key %q", ev.Key)
		}
		if r.inFlight[ev.Key] {
			r.t.Errorf("key %q has two events in flight at once", ev.Key)
		}
		keys = append(keys, ev.Key)
		r.inFlight[ev.Key] = true
	}
	r.got = append(r.got, events...)
	r.mu.Unlock()

	errs := make([]error, len(events))
	if r.fail != nil {
		for i, ev := range events {
			errs[i] = r.fail(ev)
		}
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	for i, ev := range events {
		delete(r.inFlight, ev.Key)
		if errs[i] == nil {
			r.acked = append(r.acked, ev)
		}
	}
	return outbox.Errors(errs)
}

// ackedIDs returns the ids of the events acknowledged, in order, repeats included.
func (r *recorder) ackedIDs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, len(r.acked))
	for i, ev := range r.acked {
		out[i] = ev.ID
	}
	return out
}

// handed returns every event handed over, in order, repeats included.
func (r *recorder) handed() []outbox.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// acked returns the events acknowledged, in order, repeats included.
func (r *recorder) ackedEvents() []outbox.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.acked)
}

// firstArrivals returns, per key, the ids of evs in the order of their first arrival.
func firstArrivals(evs []outbox.Event) map[string][]string {
	seen := map[string]bool{}
	out := map[string][]string{}
	for _, ev := range evs {
		if seen[ev.ID] {
			continue
		}
		seen[ev.ID] = true
		out[ev.Key] = append(out[ev.Key], ev.ID)
	}
	return out
}

// traced returns e's Store with the Tracer t.
func (e *env) traced(t txinbox.OperationTracer) txinbox.Store {
	st := e.Store()
	st.Tracer = t
	return st
}
