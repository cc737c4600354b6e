package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/internal/testkit/testdb"
	"github.com/txinbox/txinbox/worker"
)

// An event delivered twice is one inbox message and one notification; an event that is not an
// AccountCredited is a dead letter, without a notification. (The run with the ledger, the relay, the
// broker and SIGKILLs is examples/ledger's TestTwoServicesExactlyOnce.)
func TestOneNotificationPerEvent(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	for range 2 { // Migrate may run again
		if err := Migrate(ctx, db.Pool, db.Schema); err != nil {
			t.Fatal(err)
		}
	}
	c, err := inbox.New(db.Store(), inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	msgs := []inbox.Message{
		{Consumer: Consumer, Kind: KindAccountCredited, Key: "ev-1", Payload: []byte(`{"entry_id":1,"account_id":"a","amount_cents":250,"balance_cents":250}`)},
		{Consumer: Consumer, Kind: KindAccountCredited, Key: "ev-1", Payload: []byte(`{"entry_id":1,"account_id":"a","amount_cents":250,"balance_cents":250}`)},
		{Consumer: Consumer, Kind: KindAccountCredited, Key: "ev-2", Payload: []byte(`{"entry_id":2,"account_id":"a","amount_cents":5,"balance_cents":255}`)},
		{Consumer: Consumer, Kind: KindAccountCredited, Key: "ev-3", Payload: []byte(`{"account_id":"a"}`)},
	}
	for _, m := range msgs {
		if _, err := c.Receive(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	hs := worker.NewHandlers()
	worker.Handle(hs, KindAccountCredited, Handler(db.Schema, nil))
	p, err := worker.New(db.Store(), worker.Config{Consumer: Consumer, Handlers: hs, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Stop(context.Background()) }()
	deadline := time.Now().Add(time.Minute)
	for db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE state IN ('completed', 'dead')`) < 3 {
		if time.Now().After(deadline) {
			t.Fatal("gave up waiting for the messages to be handled")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE state = 'dead' AND key = 'ev-3'`); n != 1 {
		t.Errorf("the malformed event is not dead (%d)", n)
	}
	if n := db.Count(t, `SELECT count(*) FROM {schema}.notifications`); n != 2 {
		t.Errorf("%d notifications, want 2", n)
	}
	if n := db.Count(t, `SELECT count(*) FROM {schema}.notifications
		WHERE (event_id, entry_id, amount_cents) IN (('ev-1', 1, 250), ('ev-2', 2, 5))`); n != 2 {
		t.Errorf("the notifications are not those of ev-1 and ev-2 (%d match)", n)
	}
}

func TestFlags(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	for args, want := range map[string]string{
		"":                            "no database",
		"--database-url x":            "--nats-url is required",
		"--database-url x --nats-url": "flag needs an argument",
		"--database-url x extra":      "unexpected arguments",
	} {
		err := run(context.Background(), strings.Fields(args), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("run(%q) = %v; want an error saying %q", args, err, want)
		}
	}
	if err := run(context.Background(), []string{"-h"}, io.Discard, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
}
