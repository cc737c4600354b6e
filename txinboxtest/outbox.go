package txinboxtest

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/outbox"
	"github.com/txinbox/txinbox/txinboxtest/outboxtest"
)

// Publish publishes msgs with an outbox.Client of st (its Config zero: the defaults) in one
// transaction of its own begun on st.DB, commits it, and returns the events' ids, in the order of
// msgs. Any error fails t. Use it to put events into an outbox before [Drain] or a relay of the
// test's; code under test publishes in its own transactions.
func Publish(t testing.TB, st txinbox.Store, msgs ...outbox.Message) []string {
	t.Helper()
	c, err := outbox.New(st, outbox.Config{})
	if err != nil {
		t.Fatalf("txinboxtest: %v", err)
	}
	ctx := context.Background()
	var ids []string
	if err := pgx.BeginFunc(ctx, st.DB, func(tx pgx.Tx) error {
		ids, err = c.Publish(ctx, tx, msgs...)
		return err
	}); err != nil {
		t.Fatalf("txinboxtest: publish: %v", err)
	}
	return ids
}

// Recorder is an [outbox.Publisher] for tests: it keeps every event handed to it, in the order of
// the hand-overs, and acknowledges it, or answers what Fate says. Its zero value acknowledges every
// event. It may be used by several relays and goroutines at once.
type Recorder struct {
	// Fate, if set, decides what Publish answers for each event: nil (acknowledged: the relay records
	// it sent), an error wrapped with [txinbox.Permanent] (dead at once), or another error (retried
	// after the relay's Backoff). The event is kept whatever Fate answers. Nil: every event is
	// acknowledged.
	Fate func(outbox.Event) error

	mu     sync.Mutex
	events []outbox.Event
}

// Publish implements [outbox.Publisher]: it keeps events and answers each as Fate says (see
// [outbox.Errors]).
func (r *Recorder) Publish(_ context.Context, events []outbox.Event) error {
	r.mu.Lock()
	r.events = append(r.events, events...)
	r.mu.Unlock()
	if r.Fate == nil {
		return nil
	}
	errs := make([]error, len(events))
	for i, ev := range events {
		errs[i] = r.Fate(ev)
	}
	return outbox.Errors(errs)
}

// Events returns a copy of the events handed over so far, in the order they were handed over; an
// event handed over again (a retry) appears again.
func (r *Recorder) Events() []outbox.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// Drain runs an [outbox.Relay] of st with cfg until st's outbox holds no event that is claimed or
// due, then stops it: every event is then sent, dead, or waiting for a retry or its NotBefore. It
// fails t if that takes more than 2 minutes.
//
// cfg.Publisher is required ([Recorder] records what it gets). Drain turns LISTEN off (the relay
// polls) and fills these zero fields with values for tests rather than the relay's defaults:
// PollInterval 10ms, Concurrency 1 and Backoff one hour, so that an event whose attempt failed waits
// for its retry past the end of Drain rather than being retried until it is dead. The others take the
// relay's defaults.
func Drain(t testing.TB, st txinbox.Store, cfg outbox.RelayConfig) {
	t.Helper()
	outboxtest.DrainStore(t, st, cfg)
}
