// Package outboxtest holds what the tests of admin, console, metrics and the txinbox command share
// about the outbox: events published with outbox.Client.Publish and brought to their states (sent,
// retrying, dead, claimed) by real relays whose Publisher is a fake that decides each event's fate;
// and the drain loop of the public txinboxtest.Drain ([DrainStore]).
//
// The package is txinbox's own test support: a program may import it, but its API may change in any
// release (the test kit for code using txinbox is package txinboxtest).
package outboxtest

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/outbox"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// Publish publishes msgs in one transaction of its own, committed, and returns their ids in the
// outbox table (the ids of the admin calls), in the order of msgs.
func Publish(t testing.TB, db *testdb.DB, msgs ...outbox.Message) []int64 {
	t.Helper()
	ctx := context.Background()
	c, err := outbox.New(db.Store(), outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var eventIDs []string
	if err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		eventIDs, err = c.Publish(ctx, tx, msgs...)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	ids := make([]int64, len(eventIDs))
	for i, ev := range eventIDs {
		if err := db.Pool.QueryRow(ctx, db.SQL(`SELECT id FROM {schema}.outbox WHERE event_id = $1::uuid`), ev).Scan(&ids[i]); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

// Fate decides what a fake Publisher answers for an event: nil (acknowledged: sent), an error
// wrapped with txinbox.Permanent (dead at once), or another error (retried, after an hour: the event
// stays retrying for the test's life).
type Fate func(outbox.Event) error

// ByHeaders is the Fate that reads each event's headers: an event with a header "refuse" is refused
// permanently with that text as its error (stored as "permanent: " and the text), one with a header
// "fail" fails with that text (retried after an hour), and the others are acknowledged.
func ByHeaders(ev outbox.Event) error {
	if msg := ev.Headers["refuse"]; msg != "" {
		return txinbox.Permanent(errors.New(msg))
	}
	if msg := ev.Headers["fail"]; msg != "" {
		return errors.New(msg)
	}
	return nil
}

// Refuse returns a Fate that refuses (permanently) the events of the given topics with the error
// text msg, and acknowledges the others.
func Refuse(msg string, topics ...string) Fate {
	return func(ev outbox.Event) error {
		for _, tp := range topics {
			if ev.Topic == tp {
				return txinbox.Permanent(errors.New(msg))
			}
		}
		return nil
	}
}

// Drain runs a relay on db's schema whose Publisher answers each event as fate says, until no event
// is claimed or due (every event is sent, dead, retrying after its hour, or not due yet), then stops
// it ([DrainStore]). mod, if set, changes the relay's configuration.
func Drain(t testing.TB, db *testdb.DB, fate Fate, mod func(*outbox.RelayConfig)) {
	t.Helper()
	pub := outbox.PublisherFunc(func(_ context.Context, events []outbox.Event) error {
		errs := make([]error, len(events))
		for i, ev := range events {
			errs[i] = fate(ev)
		}
		return outbox.Errors(errs)
	})
	cfg := outbox.RelayConfig{Publisher: pub}
	if mod != nil {
		mod(&cfg)
	}
	st := db.Store()
	st.Logger = slog.New(slog.DiscardHandler)
	DrainStore(t, st, cfg)
}

// DrainStore is txinboxtest.Drain (documented there): it runs a relay of st with cfg (LISTEN off;
// zero PollInterval, Concurrency and Backoff: 10ms, 1, an hour) until st's outbox holds no event
// claimed or due, then stops it. It lives here, with no Docker client in its imports, so that the
// tests of admin, console and metrics share it without linking testcontainers.
func DrainStore(t testing.TB, st txinbox.Store, cfg outbox.RelayConfig) {
	t.Helper()
	st, err := st.Resolve()
	if err != nil {
		t.Fatalf("txinboxtest: %v", err)
	}
	st.NotifyInterval = -1 // LISTEN off: the relay polls
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 10 * time.Millisecond
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 1
	}
	if cfg.Backoff == nil {
		cfg.Backoff = txinbox.BackoffFunc(func(int) time.Duration { return time.Hour })
	}
	idle := func() bool {
		var busy bool
		err := st.DB.QueryRow(context.Background(), "SELECT EXISTS (SELECT FROM "+pgx.Identifier{st.Schema, "outbox_queue"}.Sanitize()+
			" WHERE claimed OR run_at <= now())").Scan(&busy)
		if err != nil {
			t.Fatalf("txinboxtest: read the outbox queue: %v", err)
		}
		return !busy
	}
	// Checked again once the relay has stopped: between the record of a batch and the claim of the
	// next event of its key, the queue may look idle.
	for first := true; first || !idle(); first = false {
		r, err := outbox.NewRelay(st, cfg)
		if err != nil {
			t.Fatalf("txinboxtest: %v", err)
		}
		if err := r.Start(context.Background()); err != nil {
			t.Fatalf("txinboxtest: start the relay: %v", err)
		}
		deadline := time.Now().Add(2 * time.Minute)
		for !idle() {
			if time.Now().After(deadline) {
				stop(t, r)
				t.Fatalf("txinboxtest: the outbox of %s still has events claimed or due after 2 minutes", st.Schema)
			}
			time.Sleep(10 * time.Millisecond)
		}
		stop(t, r)
	}
}

// Hold runs a relay on db's schema that claims the due events and holds them (its Publish call waits)
// until t ends: they stay claimed. It returns once the relay holds n events.
func Hold(t testing.TB, db *testdb.DB, n int) {
	t.Helper()
	release := make(chan struct{})
	var once sync.Once
	pub := outbox.PublisherFunc(func(ctx context.Context, events []outbox.Event) error {
		<-release
		return ctx.Err()
	})
	r := relay(t, db, pub, func(c *outbox.RelayConfig) { c.Lease, c.Timeout = time.Hour, 30*time.Minute })
	start(t, r)
	t.Cleanup(func() { once.Do(func() { close(release) }); stop(t, r) })
	WaitFor(t, "the relay to hold the events", func() bool {
		return db.Count(t, `SELECT count(*) FROM {schema}.outbox_queue WHERE claimed`) == int64(n)
	})
}

// relay returns a relay of db's schema with pub: one runner, polling every 10 ms, no LISTEN, an hour
// of backoff (a failed event stays retrying), and mod applied.
func relay(t testing.TB, db *testdb.DB, pub outbox.Publisher, mod func(*outbox.RelayConfig)) *outbox.Relay {
	t.Helper()
	cfg := outbox.RelayConfig{Publisher: pub, Concurrency: 1, PollInterval: 10 * time.Millisecond,
		Backoff: txinbox.BackoffFunc(func(int) time.Duration { return time.Hour })}
	if mod != nil {
		mod(&cfg)
	}
	st := db.Store()
	st.NotifyInterval = -1 // no LISTEN
	st.Logger = slog.New(slog.DiscardHandler)
	r, err := outbox.NewRelay(st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func start(t testing.TB, r *outbox.Relay) {
	t.Helper()
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func stop(t testing.TB, r *outbox.Relay) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // only keeps a hang from lasting
	defer cancel()
	if err := r.Stop(ctx); err != nil {
		t.Errorf("txinboxtest: stop the relay: %v", err)
	}
}

// WaitFor polls cond every 10 ms until it holds; the deadline (2 minutes) only keeps a broken test
// from hanging.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
